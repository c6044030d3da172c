# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Written by scripts/anchors from the published wheels; do not edit by hand (_anchors.py reads it).

Release -> file (relative to site-packages) -> the sha256 of the file in the release's wheel; a file the
release does not ship is absent from its entry.
"""

UPSTREAM = {
    # sglang-0.5.4-py3-none-any.whl
    '0.5.4': {
        'sglang/srt/layers/communicator.py': '766a3275ec87a225500abd4fbcc713c0cd4a8abbfbd4f64e6be2527950fa9f9d',
        'sglang/srt/model_executor/cuda_graph_runner.py': '873ef2deae49edef259c38433f1889206bed186ed6b343a0f33b5b699fe6a97c',
        'sglang/srt/model_executor/model_runner.py': 'a1c8e690adf22b3ff3fc401deac80e67cc5df2ace6a70f5ff06d74d38130f8be',
        'sglang/srt/models/deepseek_v2.py': '1333d4a11182701a0921b67db3f5f3b48562929ec548db13bf8daa501cc7a0d4',
    },
    # sglang-0.5.4.post1-py3-none-any.whl
    '0.5.4.post1': {
        'sglang/srt/layers/communicator.py': '652d40ff09026a58eb393d67ae34255212263457b266c88e3548ce7c86b94a30',
        'sglang/srt/model_executor/cuda_graph_runner.py': '873ef2deae49edef259c38433f1889206bed186ed6b343a0f33b5b699fe6a97c',
        'sglang/srt/model_executor/model_runner.py': 'f36480945a75e176d4a1ca86c5c1241f84e818bd74461d0ecf5610b49f51d2b7',
        'sglang/srt/models/deepseek_v2.py': '5d9da86255f9190dddb112a57ebe20e9140c9d731fd364bd8a1b336e7f2987d3',
    },
    # sglang-0.5.4.post2-py3-none-any.whl
    '0.5.4.post2': {
        'sglang/srt/layers/communicator.py': 'e4525da40e3450f5a62136d35b58f807cf084183239e4a80e082e43400bf7907',
        'sglang/srt/model_executor/cuda_graph_runner.py': '6418642d1819f0f6b1ef8a41bc847341dce8819b7ece0332b82ff4b87c2ebc6d',
        'sglang/srt/model_executor/model_runner.py': 'da595ffe989c20e6216fd630a8a50997026b8630c8a052a5084527a45db1780e',
        'sglang/srt/models/deepseek_v2.py': 'ed8ef20a00cebf3b1716943c1aef0c6b38ea5eefbbff87faf6a5e6dc80230e03',
    },
    # sglang-0.5.4.post3-py3-none-any.whl
    '0.5.4.post3': {
        'sglang/srt/layers/communicator.py': 'f85c93e61aeea4f7e3fd81f514a0e1be2b4d6426d0fc31ac4f5f1ee18ab168b9',
        'sglang/srt/model_executor/cuda_graph_runner.py': '1b9833c17b32217c12fb131f722829a54428fb5b26bd4a997f5ad848dccad337',
        'sglang/srt/model_executor/model_runner.py': '814fe9a1c1833abd51dc873a35728a28c26448f5a087ea4344f356bff76c6cc7',
        'sglang/srt/models/deepseek_v2.py': 'dc192231700ac08f07fadccb6abc22cecc206ef9072f80f9af2ac5cdda1054e0',
    },
    # sglang-0.5.5-py3-none-any.whl
    '0.5.5': {
        'sglang/srt/layers/communicator.py': 'f85c93e61aeea4f7e3fd81f514a0e1be2b4d6426d0fc31ac4f5f1ee18ab168b9',
        'sglang/srt/model_executor/cuda_graph_runner.py': '1b9833c17b32217c12fb131f722829a54428fb5b26bd4a997f5ad848dccad337',
        'sglang/srt/model_executor/model_runner.py': '814fe9a1c1833abd51dc873a35728a28c26448f5a087ea4344f356bff76c6cc7',
        'sglang/srt/models/deepseek_v2.py': '9f1a879f58f16f41434ccbcbeadbf36b501460e63bbf2808ae5abc37706e0674',
    },
    # sglang-0.5.5.post1-py3-none-any.whl
    '0.5.5.post1': {
        'sglang/srt/layers/communicator.py': 'ceee4679bcf76b43d5acfdac248a24da2b1173ab2e77d3a0ce3c34c82cc3534d',
        'sglang/srt/model_executor/cuda_graph_runner.py': 'dbd771cf1ac99bcda345560f9f104ff76143fd9664698946078bf47ea9deff18',
        'sglang/srt/model_executor/model_runner.py': '21b60d9aba26d5d2a54d636b8ad0c1c70f9cc742c4d77d1d6b6ffc8cfca8defe',
        'sglang/srt/models/deepseek_v2.py': '69a767ed492750c541fb3f820dcabb9709a14e47310183aa140eeb65b017f34a',
    },
    # sglang-0.5.5.post2-py3-none-any.whl
    '0.5.5.post2': {
        'sglang/srt/layers/communicator.py': 'b19b40ce9011af7d68d77e951ebdfd9bde6049e93c2fb52e534059338e8a7040',
        'sglang/srt/model_executor/cuda_graph_runner.py': '5135cf646a538019ae2602f041474ee6d380c80dc3b0d5ce40910632c3305376',
        'sglang/srt/model_executor/model_runner.py': '21b60d9aba26d5d2a54d636b8ad0c1c70f9cc742c4d77d1d6b6ffc8cfca8defe',
        'sglang/srt/models/deepseek_v2.py': 'edae66914e7dfe5b7c8b697a86d1c1f7b4b6e2c7bffe7b96abb1508cf8aeff3a',
    },
    # sglang-0.5.5.post3-py3-none-any.whl
    '0.5.5.post3': {
        'sglang/srt/layers/communicator.py': 'e3f911a97cb960c875a06014ab149d75bff8736ddebdf4a6ad0a3654003c6407',
        'sglang/srt/model_executor/cuda_graph_runner.py': 'b6435c9c63252bb7c8e97a6aae601e69859c573c01c5d45bf737cf78a3e1074b',
        'sglang/srt/model_executor/model_runner.py': 'c16d0d2b133e0e1efd7d338034a7908e662bbadab1dcef418418c08c28910c45',
        'sglang/srt/models/deepseek_v2.py': '620cd09545404fd62952e2239b905cfb26bc7565b361ac76bdf8f6d89ca80f49',
    },
    # sglang-0.5.6-py3-none-any.whl
    '0.5.6': {
        'sglang/srt/layers/communicator.py': 'e3f911a97cb960c875a06014ab149d75bff8736ddebdf4a6ad0a3654003c6407',
        'sglang/srt/model_executor/cuda_graph_runner.py': '6afc41518513dfe8a9fe5212b2d29c4ad6c6adee37eb3e0649173db6400e6978',
        'sglang/srt/model_executor/model_runner.py': '010d9ac02b0801f964bc7f6c9a0c01c6ad8468d500e4d20acc4bd26899472449',
        'sglang/srt/models/deepseek_v2.py': 'f06d4cc2aff031f4926a86dc208f94dc45c0f0e550a5f3798bbf195180e5c001',
    },
    # sglang-0.5.6.post1-py3-none-any.whl
    '0.5.6.post1': {
        'sglang/srt/layers/communicator.py': '6493a61b2964d4c04317cee75af98d6163510d52356d21c87df28b9723999ef4',
        'sglang/srt/model_executor/cuda_graph_runner.py': 'e8c4d23bcfea30b09b7e5e2a3b90a1c032c32405ea39f65dcce7e797e6468655',
        'sglang/srt/model_executor/model_runner.py': '396063d4e069c410724167f33f2d32d383ea386d03bbb5183662d3d26013e499',
        'sglang/srt/models/deepseek_v2.py': '78c055f435d6d7a273869aff4fadbddf238e75a7ac6f34256f0420160266cec7',
    },
    # sglang-0.5.6.post2-py3-none-any.whl
    '0.5.6.post2': {
        'sglang/srt/layers/communicator.py': '6493a61b2964d4c04317cee75af98d6163510d52356d21c87df28b9723999ef4',
        'sglang/srt/model_executor/cuda_graph_runner.py': 'b812fc8e9188a0907a198b2d81f5bf72e894488a24aa7a473545a9e2d3e41296',
        'sglang/srt/model_executor/model_runner.py': 'a9d0dd392aa99ccddb01e143a567604a41fc8f214f7c99fb2f024aa032eca26a',
        'sglang/srt/models/deepseek_v2.py': '07aaa454ef64488eda9835d96ec9e437687e1024f8004554547e46a7ed602fbd',
    },
    # sglang-0.5.7-py3-none-any.whl
    '0.5.7': {
        'sglang/srt/layers/communicator.py': '6218a74c085a54f4aef05919d2c6dad12f32dd6555e9006a94a6d43c9f8355b6',
        'sglang/srt/model_executor/cuda_graph_runner.py': '777eb819ea0362bb8395ac2de2666f7154b386ddf234c8b3b91d788598885c5c',
        'sglang/srt/model_executor/model_runner.py': 'dd34319a6f7b0d6a236767cd64073476b701d358cb429816f81f0d28372bbb45',
        'sglang/srt/models/deepseek_v2.py': '1dd048f1cbfebf71fe51b82372b22c32e1c20c661f5fa7e34e9cef2598100e00',
    },
    # sglang-0.5.8-py3-none-any.whl
    '0.5.8': {
        'sglang/srt/layers/communicator.py': '477635a8d9839ba8b06220ab00d2078329a583064227b73ab00368889bc582cc',
        'sglang/srt/model_executor/cuda_graph_runner.py': '06249221c5ff95bc251d386ffa0ec7e626aded91501e4ddf57c07fd13970ff1b',
        'sglang/srt/model_executor/model_runner.py': '9ad8f7c158de7736555c02989f501ca0759390eea35885fb070740bea64fc00d',
        'sglang/srt/models/deepseek_v2.py': '1f37d7714ccd20b37bceec3c451977ba3d196117b937d5f996723faa96537036',
    },
    # sglang-0.5.8.post1-py3-none-any.whl
    '0.5.8.post1': {
        'sglang/srt/layers/communicator.py': '477635a8d9839ba8b06220ab00d2078329a583064227b73ab00368889bc582cc',
        'sglang/srt/model_executor/cuda_graph_runner.py': '06249221c5ff95bc251d386ffa0ec7e626aded91501e4ddf57c07fd13970ff1b',
        'sglang/srt/model_executor/model_runner.py': '9ad8f7c158de7736555c02989f501ca0759390eea35885fb070740bea64fc00d',
        'sglang/srt/models/deepseek_v2.py': '1f37d7714ccd20b37bceec3c451977ba3d196117b937d5f996723faa96537036',
    },
    # sglang-0.5.9-py3-none-any.whl
    '0.5.9': {
        'sglang/srt/layers/communicator.py': '7d07c753240e30de20e5c9bf511dc0ebf7517e559a309d5b06a3951e5cbe0d05',
        'sglang/srt/model_executor/cuda_graph_runner.py': '34b3fbf87ee088954f17385c8a40fa129a13ff1aef34eb07cad6999b112fc958',
        'sglang/srt/model_executor/model_runner.py': 'be071c1567de4b63e82d070623f95aa4bb5f537698659526c68b1c7d05074640',
        'sglang/srt/models/deepseek_v2.py': '4071b9a6a6ac71e1143204708df42f2ba5bd163a5d7a020579242df56e490a35',
    },
    # sglang-0.5.10-py3-none-any.whl
    '0.5.10': {
        'sglang/srt/layers/communicator.py': 'd8fac5d3128ba33debe32e477c169502bcb07a69c1fc8bf466872948e73ebde2',
        'sglang/srt/model_executor/cuda_graph_runner.py': '1c7006e3e270eee6f90868755f975fb4277191266944f3533289cc72ce5f2080',
        'sglang/srt/model_executor/model_runner.py': '58fb9250f58831dc00e66cbdd3e7fbe3e86066063dfd658f1757db29220889a5',
        'sglang/srt/models/deepseek_v2.py': 'ace3cfb8eeb74f21bbfb9463b5cc0be3682232989f0a12472ef533ec618af67e',
    },
    # sglang-0.5.10.post1-py3-none-any.whl
    '0.5.10.post1': {
        'sglang/srt/layers/communicator.py': 'd8fac5d3128ba33debe32e477c169502bcb07a69c1fc8bf466872948e73ebde2',
        'sglang/srt/model_executor/cuda_graph_runner.py': '1c7006e3e270eee6f90868755f975fb4277191266944f3533289cc72ce5f2080',
        'sglang/srt/model_executor/model_runner.py': '58fb9250f58831dc00e66cbdd3e7fbe3e86066063dfd658f1757db29220889a5',
        'sglang/srt/models/deepseek_v2.py': 'ace3cfb8eeb74f21bbfb9463b5cc0be3682232989f0a12472ef533ec618af67e',
    },
    # sglang-0.5.11-cp312-cp312-manylinux_2_34_x86_64.whl
    '0.5.11': {
        'sglang/srt/layers/communicator.py': 'c9c622b84545f96510df567c5a92ba9e8ba7eab02adcd130a9459245a50843c1',
        'sglang/srt/model_executor/cuda_graph_runner.py': 'a686e17bf4afa40e405771fdbd6a7a0fed040e53ebb3d9689fd05fd2bc6a7909',
        'sglang/srt/model_executor/model_runner.py': '8dc3d81b8ce758e19d2e7cd3427c3fd21307b1e332276f777ae95225751f4978',
        'sglang/srt/models/deepseek_v2.py': '505a213c65a30389ca36d6d0ba56990530a979d95dc2e3b30b46a962b7db1bf5',
    },
    # sglang-0.5.12-cp312-cp312-manylinux_2_34_x86_64.whl
    '0.5.12': {
        'sglang/srt/layers/communicator.py': '4ad75111168544ce1505f3718fba1188d1c9ea15587aff85b4dfbfaf6112b336',
        'sglang/srt/model_executor/cuda_graph_runner.py': '838c29f81f2e5cfe39aa2147ae342325bfc6746907deee1dbc15e40556cc1bbb',
        'sglang/srt/model_executor/model_runner.py': '84b3a701c1d56130ec98648f153e9f37334eb72cca67bfd56db9838c575193c9',
        'sglang/srt/models/deepseek_v2.py': '3947d605e2ffeafb2d20baa2d87490d02a5671df0eb7bd0527ec60581580a49c',
    },
    # sglang-0.5.12.post1-cp311-cp311-manylinux_2_34_x86_64.whl
    '0.5.12.post1': {
        'sglang/srt/layers/communicator.py': '42697a1fcce2b2fdd6bbfccf4e48b7688445c0df593274454e403e8f3acfdf12',
        'sglang/srt/model_executor/cuda_graph_runner.py': '838c29f81f2e5cfe39aa2147ae342325bfc6746907deee1dbc15e40556cc1bbb',
        'sglang/srt/model_executor/model_runner.py': '1bbf2a33466de8d83652d5b8db3664cd2b69303a6199300f4ffaaff3698153cc',
        'sglang/srt/models/deepseek_v2.py': '3947d605e2ffeafb2d20baa2d87490d02a5671df0eb7bd0527ec60581580a49c',
    },
    # sglang-0.5.13-cp312-cp312-manylinux_2_34_x86_64.whl
    '0.5.13': {
        'sglang/srt/layers/communicator.py': '893ff3d70ef9d5d1d8a062598161b6119295f0f78970f776914ec9c36f806db3',
        'sglang/srt/model_executor/cuda_graph_runner.py': '7d1898247e80ff6a446eb42e4968d2eea0df30b109ee2d089a9ad78791bc079e',
        'sglang/srt/model_executor/model_runner.py': 'f4dad073eb9f89afd4cda0439b97dee63f8de131d0ed10078b817dba1f978f59',
        'sglang/srt/models/deepseek_v2.py': 'c8f6670afa18ec5cb388e9891f6c73fd65e46392930f0ef4d1f0ea5981503222',
    },
    # sglang-0.5.13.post1-cp312-cp312-manylinux_2_34_x86_64.whl
    '0.5.13.post1': {
        'sglang/srt/layers/communicator.py': '893ff3d70ef9d5d1d8a062598161b6119295f0f78970f776914ec9c36f806db3',
        'sglang/srt/model_executor/cuda_graph_runner.py': '7d1898247e80ff6a446eb42e4968d2eea0df30b109ee2d089a9ad78791bc079e',
        'sglang/srt/model_executor/model_runner.py': 'f4dad073eb9f89afd4cda0439b97dee63f8de131d0ed10078b817dba1f978f59',
        'sglang/srt/models/deepseek_v2.py': 'c8f6670afa18ec5cb388e9891f6c73fd65e46392930f0ef4d1f0ea5981503222',
    },
    # sglang-0.5.14-cp311-cp311-manylinux_2_34_x86_64.whl
    '0.5.14': {
        'sglang/srt/layers/communicator.py': '0ed2b06b7c0d60ca9ed5f582b8d2bd4bb5c018ad914209c74e909ae0e5379dbb',
        'sglang/srt/model_executor/model_runner.py': '7cf4ac968e9c4587331983626a0bc88c6dc76f24dbc66ca6135ab56b58a4a679',
        'sglang/srt/models/deepseek_v2.py': '947fdc256101f538a668090f82e5eb5f888e2434f2bbbf69a99cdaa628cf902e',
    },
    # sglang-0.5.15-cp312-cp312-manylinux_2_34_x86_64.whl
    '0.5.15': {
        'sglang/srt/layers/communicator.py': 'b22e25b93728842ba74001a71b3b3fa59150ead6e0f5dc4f9681d18bc9a6c38c',
        'sglang/srt/model_executor/model_runner.py': '91fcb5873f26679498eec052c68e1d91102af79cdf7d0486dd5aa9f68e839171',
        'sglang/srt/models/deepseek_v2.py': 'c19120d6daa4e8003ffd0e17f593c9cacd9c30b6cea1f2cc6139ed910749ee31',
    },
    # sglang-0.5.15.post1-cp312-cp312-manylinux_2_34_x86_64.whl
    '0.5.15.post1': {
        'sglang/srt/layers/communicator.py': 'b22e25b93728842ba74001a71b3b3fa59150ead6e0f5dc4f9681d18bc9a6c38c',
        'sglang/srt/model_executor/model_runner.py': '91fcb5873f26679498eec052c68e1d91102af79cdf7d0486dd5aa9f68e839171',
        'sglang/srt/models/deepseek_v2.py': 'a73242802d810bf7fabe45303909eb015c00aeec567a46b404f6583e26e2a237',
    },
    # sglang-0.5.16-cp312-cp312-manylinux_2_34_x86_64.whl
    '0.5.16': {
        'sglang/srt/layers/communicator.py': '2a16fcd432025a1fd6c382b91fdf2ed934bc396aebde4d7b56ad173fb4282a66',
        'sglang/srt/model_executor/model_runner.py': '1122748dcd075894b0366f6d3b02d340005e4e4b26ee046cec1a16384e0dd303',
        'sglang/srt/models/deepseek_v2.py': '47709951b15d7ac494c25f079a242c17375a8ee01007c829ea0c9ab604794689',
    },
    # sglang-0.5.17-cp312-cp312-manylinux_2_34_x86_64.whl
    '0.5.17': {
        'sglang/srt/layers/aux_hidden_states.py': 'a3e5218d5d3dd04703385fa8b9dc52ae753731185925d597b2c2a84f69a18fd2',
        'sglang/srt/layers/communicator.py': '461626b9f4d55d6cd0f547fdf55701338dd0002393b206ad18f9e482de3b24db',
        'sglang/srt/model_executor/model_runner.py': '221032bf7ae57d2ebdb96801150a48d23244840a9b7938dc586e911671c11102',
        'sglang/srt/models/deepseek_v2.py': 'e73c033416e8746bb435dd4e7d39ead521039c511182b5f8b536a40a3308d08a',
    },
    # sglang-0.5.18-cp312-cp312-manylinux_2_34_x86_64.whl
    '0.5.18': {
        'sglang/srt/layers/aux_hidden_states.py': 'a3e5218d5d3dd04703385fa8b9dc52ae753731185925d597b2c2a84f69a18fd2',
        'sglang/srt/layers/communicator.py': '7305647bba46a6cfac7b1eef10a0c4f4ca89e802cd4a1d045774e8e47db0481f',
        'sglang/srt/model_executor/model_runner.py': '2bbe91845a9482d04ce0d1ea870a41397be1b4fbe436e0a2a4f555ae7cc67adb',
        'sglang/srt/models/deepseek_v2.py': 'd61238da43a34df8ee324b1c3d36082894aa75b34775a1af7772c2a6c016c932',
    },
    # sglang-0.5.19-cp312-cp312-manylinux_2_34_x86_64.whl
    '0.5.19': {
        'sglang/srt/layers/aux_hidden_states.py': 'a3e5218d5d3dd04703385fa8b9dc52ae753731185925d597b2c2a84f69a18fd2',
        'sglang/srt/layers/communicator.py': 'fca5d8a6d52d5681c8f6faa78ae4c6157cde96d4be06a55c59555b3f6ae88caf',
        'sglang/srt/model_executor/model_runner.py': 'b40efe0c7fb87d6f3baf5f9df3e755b9138247f82505183c564b4f8b1bc6663a',
        'sglang/srt/models/deepseek_v2.py': '8fa0cfb8e8d61b7e41680fb19a3d83bd00e0a1c2d7403b42e0a0db259b308c0b',
    },
    # sglang-0.5.20-cp312-cp312-manylinux_2_34_x86_64.whl
    '0.5.20': {
        'sglang/srt/layers/aux_hidden_states.py': '29a0d3e3a2de57794a8879f93b206ec005db7171ebd53ccd9c5225bafef468ea',
        'sglang/srt/layers/communicator.py': '385c6ab93420618dc222be44d65d129a20162cb8ee8b05d86c0e7d4e5a57eaec',
        'sglang/srt/model_executor/model_runner.py': 'df38e26ace5deae708f2353b56962afab7f92fac35d1bd4f274b7d6d62356372',
        'sglang/srt/models/deepseek_v2.py': '1578dd16dd71b78b95d4a5625f22a152fbdb6822ac6b38a4f24d106464c2831f',
    },
    # sglang-0.5.21-cp312-cp312-manylinux_2_34_x86_64.whl
    '0.5.21': {
        'sglang/srt/layers/aux_hidden_states.py': '83f6cc8742e85956143dfcb32f1eabddb40adf598a67bec270fb2df3a0a83739',
        'sglang/srt/layers/layer_boundary/stage.py': '4c3546e775800e026c97643a1183b7b7d335fa9127b6dcfa0ed7a83831fa5314',
        'sglang/srt/model_executor/model_runner.py': '36e7a69f345cf09f24699eea36a4ab0a2a305acb8b8a7e9b4e975f3fd09527f3',
        'sglang/srt/models/deepseek_v2.py': '74f67224cc3d3edcf465bea54af572ebd3b4fb9e784a6a38a445e59db6c58d7b',
    },
    # sglang-0.5.22-cp312-cp312-manylinux_2_34_x86_64.whl
    '0.5.22': {
        'sglang/srt/layers/aux_hidden_states.py': '1c0b2055a5bfef2b06096ffac1fdea073cf471f0c48ccd3b4ab577118facae92',
        'sglang/srt/layers/layer_boundary/stage.py': '2538c52efb811bf21eb2fda6e45fbc0caf9090561ddb121096fc5a33eff07e62',
        'sglang/srt/model_executor/model_runner.py': '0192531598c05e5fc5316a634ba291b81b6bc1572694fb6b303abc26690a3899',
        'sglang/srt/models/deepseek_v2.py': '1edf877e54ca6acf37e2d7dccb1704054175e2b78b8737bb9b617ffc97a2134e',
    },
    # sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl
    '0.5.23': {
        'sglang/srt/layers/aux_hidden_states.py': '29d2f3c202a8e870d1ff230462c32dc17703ecd935730982fc4e4068ccab06b7',
        'sglang/srt/layers/layer_boundary/stage.py': '782bbc56750c38b8e9cd1fd6adbb315e33289a1fa135a0720b1c830c274aec7f',
        'sglang/srt/model_executor/model_runner.py': '2ef478a3c5093c476e606c46d182184722350dd87e3e84284ef421eb4cf624f0',
        'sglang/srt/models/deepseek_v2.py': 'f61f93019bf1e7680f45a1fe227244433e1b22021cb955e53d25b9cf900473f9',
    },
}
