//! Upstream CAPD v1.14.2's table of kind node images (its `kind` mapper), as data, and its lookup
//! rules: which kind release built the image a Machine runs ("mode"), and which pre-built tag a
//! Kubernetes version maps to.
//!
//! The mode matters because images built by kind v0.19 and older must not run in a private cgroup
//! namespace, while v0.20 and newer require one.

/// How a kind node image must be run: by the kind release that built it, grouped as upstream does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KindMode {
    /// Built by kind v0.19 or older: host cgroup namespace.
    Mode0_19,
    /// Built by kind v0.20 or newer (also the guess for any unknown image): private cgroup namespace.
    Mode0_20,
}

/// The mode assumed for an image the table does not know (upstream's latest mode).
pub const LATEST_MODE: KindMode = KindMode::Mode0_20;

use KindMode::{Mode0_19, Mode0_20};

/// Upstream v1.14.2's pre-built mappings, in its order (newest kind release first; the order is
/// part of the lookup rule). Each row: the Kubernetes version, the mode, the image with its digest.
/// Rows repeat a version when several kind releases built it; the first row of a version wins.
/// Generated from upstream's `infrastructure/kind/mapper.go` (kind v0.33 down to v0.17).
#[rustfmt::skip]
pub const PREBUILT: &[(&str, KindMode, &str)] = &[
    ("1.37.0", Mode0_20, "kindest/node:v1.37.0@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5"),
    ("1.36.4", Mode0_20, "kindest/node:v1.36.4@sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed"),
    ("1.35.8", Mode0_20, "kindest/node:v1.35.8@sha256:07b2536e30b803ed61d1677a79df6115f798ce64c80f9e22f6ed45afd09323c0"),
    ("1.34.11", Mode0_20, "kindest/node:v1.34.11@sha256:44e222ee2132dab25ff87301682f89eb82c7880ea3a1bf543bfe9708fd08d67d"),
    ("1.36.1", Mode0_20, "kindest/node:v1.36.1@sha256:3489c7674813ba5d8b1a9977baea8a6e553784dab7b84759d1014dbd78f7ebd5"),
    ("1.35.5", Mode0_20, "kindest/node:v1.35.5@sha256:ce977ae6d65918d0b58a5f8b5e940429c2ce42fa3a5619ec2bbc60b949c0ac95"),
    ("1.34.8", Mode0_20, "kindest/node:v1.34.8@sha256:02722c2dedddcfc00febf5d27fbeb9b7b2c14294c82109ff4a85d89ac9ba3256"),
    ("1.33.12", Mode0_20, "kindest/node:v1.33.12@sha256:3f5c8443c620245e4d355cfe09e96a91ead32ceaa569d3f1ca9edf0cb2fe2ff4"),
    ("1.35.0", Mode0_20, "kindest/node:v1.35.0@sha256:452d707d4862f52530247495d180205e029056831160e22870e37e3f6c1ac31f"),
    ("1.34.3", Mode0_20, "kindest/node:v1.34.3@sha256:08497ee19eace7b4b5348db5c6a1591d7752b164530a36f855cb0f2bdcbadd48"),
    ("1.33.7", Mode0_20, "kindest/node:v1.33.7@sha256:d26ef333bdb2cbe9862a0f7c3803ecc7b4303d8cea8e814b481b09949d353040"),
    ("1.32.11", Mode0_20, "kindest/node:v1.32.11@sha256:5fc52d52a7b9574015299724bd68f183702956aa4a2116ae75a63cb574b35af8"),
    ("1.31.14", Mode0_20, "kindest/node:v1.31.14@sha256:6f86cf509dbb42767b6e79debc3f2c32e4ee01386f0489b3b2be24b0a55aac2b"),
    ("1.34.0", Mode0_20, "kindest/node:v1.34.0@sha256:7416a61b42b1662ca6ca89f02028ac133a309a2a30ba309614e8ec94d976dc5a"),
    ("1.33.4", Mode0_20, "kindest/node:v1.33.4@sha256:25a6018e48dfcaee478f4a59af81157a437f15e6e140bf103f85a2e7cd0cbbf2"),
    ("1.32.8", Mode0_20, "kindest/node:v1.32.8@sha256:abd489f042d2b644e2d033f5c2d900bc707798d075e8186cb65e3f1367a9d5a1"),
    ("1.31.12", Mode0_20, "kindest/node:v1.31.12@sha256:0f5cc49c5e73c0c2bb6e2df56e7df189240d83cf94edfa30946482eb08ec57d2"),
    ("1.33.1", Mode0_20, "kindest/node:v1.33.1@sha256:050072256b9a903bd914c0b2866828150cb229cea0efe5892e2b644d5dd3b34f"),
    ("1.32.5", Mode0_20, "kindest/node:v1.32.5@sha256:e3b2327e3a5ab8c76f5ece68936e4cafaa82edf58486b769727ab0b3b97a5b0d"),
    ("1.31.9", Mode0_20, "kindest/node:v1.31.9@sha256:b94a3a6c06198d17f59cca8c6f486236fa05e2fb359cbd75dabbfc348a10b211"),
    ("1.30.13", Mode0_20, "kindest/node:v1.30.13@sha256:397209b3d947d154f6641f2d0ce8d473732bd91c87d9575ade99049aa33cd648"),
    ("1.33.0", Mode0_20, "kindest/node:v1.33.0@sha256:02f73d6ae3f11ad5d543f16736a2cb2a63a300ad60e81dac22099b0b04784a4e"),
    ("1.32.2", Mode0_20, "kindest/node:v1.32.2@sha256:f226345927d7e348497136874b6d207e0b32cc52154ad8323129352923a3142f"),
    ("1.31.6", Mode0_20, "kindest/node:v1.31.6@sha256:28b7cbb993dfe093c76641a0c95807637213c9109b761f1d422c2400e22b8e87"),
    ("1.30.10", Mode0_20, "kindest/node:v1.30.10@sha256:4de75d0e82481ea846c0ed1de86328d821c1e6a6a91ac37bf804e5313670e507"),
    ("1.29.14", Mode0_20, "kindest/node:v1.29.14@sha256:8703bd94ee24e51b778d5556ae310c6c0fa67d761fae6379c8e0bb480e6fea29"),
    ("1.32.0", Mode0_20, "kindest/node:v1.32.0@sha256:c48c62eac5da28cdadcf560d1d8616cfa6783b58f0d94cf63ad1bf49600cb027"),
    ("1.31.4", Mode0_20, "kindest/node:v1.31.4@sha256:2cb39f7295fe7eafee0842b1052a599a4fb0f8bcf3f83d96c7f4864c357c6c30"),
    ("1.30.8", Mode0_20, "kindest/node:v1.30.8@sha256:17cd608b3971338d9180b00776cb766c50d0a0b6b904ab4ff52fd3fc5c6369bf"),
    ("1.29.12", Mode0_20, "kindest/node:v1.29.12@sha256:62c0672ba99a4afd7396512848d6fc382906b8f33349ae68fb1dbfe549f70dec"),
    ("1.32.0", Mode0_20, "kindest/node:v1.32.0@sha256:2458b423d635d7b01637cac2d6de7e1c1dca1148a2ba2e90975e214ca849e7cb"),
    ("1.31.2", Mode0_20, "kindest/node:v1.31.2@sha256:18fbefc20a7113353c7b75b5c869d7145a6abd6269154825872dc59c1329912e"),
    ("1.30.6", Mode0_20, "kindest/node:v1.30.6@sha256:b6d08db72079ba5ae1f4a88a09025c0a904af3b52387643c285442afb05ab994"),
    ("1.29.10", Mode0_20, "kindest/node:v1.29.10@sha256:3b2d8c31753e6c8069d4fc4517264cd20e86fd36220671fb7d0a5855103aa84b"),
    ("1.28.15", Mode0_20, "kindest/node:v1.28.15@sha256:a7c05c7ae043a0b8c818f5a06188bc2c4098f6cb59ca7d1856df00375d839251"),
    ("1.27.16", Mode0_20, "kindest/node:v1.27.16@sha256:2d21a61643eafc439905e18705b8186f3296384750a835ad7a005dceb9546d20"),
    ("1.26.15", Mode0_20, "kindest/node:v1.26.15@sha256:c79602a44b4056d7e48dc20f7504350f1e87530fe953428b792def00bc1076dd"),
    ("1.31.0", Mode0_20, "kindest/node:v1.31.0@sha256:53df588e04085fd41ae12de0c3fe4c72f7013bba32a20e7325357a1ac94ba865"),
    ("1.30.4", Mode0_20, "kindest/node:v1.30.4@sha256:976ea815844d5fa93be213437e3ff5754cd599b040946b5cca43ca45c2047114"),
    ("1.30.3", Mode0_20, "kindest/node:v1.30.3@sha256:bf91e1ef2f7d92bb7734b2b896b3dddea98f0496b34d96e37dd5d7df331b7e56"),
    ("1.29.8", Mode0_20, "kindest/node:v1.29.8@sha256:d46b7aa29567e93b27f7531d258c372e829d7224b25e3fc6ffdefed12476d3aa"),
    ("1.29.7", Mode0_20, "kindest/node:v1.29.7@sha256:f70ab5d833fca132a100c1f95490be25d76188b053f49a3c0047ff8812360baf"),
    ("1.28.13", Mode0_20, "kindest/node:v1.28.13@sha256:45d319897776e11167e4698f6b14938eb4d52eb381d9e3d7a9086c16c69a8110"),
    ("1.28.12", Mode0_20, "kindest/node:v1.28.12@sha256:fa0e48b1e83bb8688a5724aa7eebffbd6337abd7909ad089a2700bf08c30c6ea"),
    ("1.27.16", Mode0_20, "kindest/node:v1.27.17@sha256:3fd82731af34efe19cd54ea5c25e882985bafa2c9baefe14f8deab1737d9fabe"),
    ("1.26.15", Mode0_20, "kindest/node:v1.26.15@sha256:1cc15d7b1edd2126ef051e359bf864f37bbcf1568e61be4d2ed1df7a3e87b354"),
    ("1.25.16", Mode0_20, "kindest/node:v1.25.16@sha256:6110314339b3b44d10da7d27881849a87e092124afab5956f2e10ecdb463b025"),
    ("1.30.0", Mode0_20, "kindest/node:v1.30.0@sha256:047357ac0cfea04663786a612ba1eaba9702bef25227a794b52890dd8bcd692e"),
    ("1.29.4", Mode0_20, "kindest/node:v1.29.4@sha256:3abb816a5b1061fb15c6e9e60856ec40d56b7b52bcea5f5f1350bc6e2320b6f8"),
    ("1.28.9", Mode0_20, "kindest/node:v1.28.9@sha256:dca54bc6a6079dd34699d53d7d4ffa2e853e46a20cd12d619a09207e35300bd0"),
    ("1.27.13", Mode0_20, "kindest/node:v1.27.13@sha256:17439fa5b32290e3ead39ead1250dca1d822d94a10d26f1981756cd51b24b9d8"),
    ("1.26.15", Mode0_20, "kindest/node:v1.26.15@sha256:84333e26cae1d70361bb7339efb568df1871419f2019c80f9a12b7e2d485fe19"),
    ("1.25.16", Mode0_20, "kindest/node:v1.25.16@sha256:5da57dfc290ac3599e775e63b8b6c49c0c85d3fec771cd7d55b45fae14b38d3b"),
    ("1.29.2", Mode0_20, "kindest/node:v1.29.2@sha256:51a1434a5397193442f0be2a297b488b6c919ce8a3931be0ce822606ea5ca245"),
    ("1.29.1", Mode0_20, "kindest/node:v1.29.1@sha256:0c06baa545c3bb3fbd4828eb49b8b805f6788e18ce67bff34706ffa91866558b"),
    ("1.28.7", Mode0_20, "kindest/node:v1.28.7@sha256:9bc6c451a289cf96ad0bbaf33d416901de6fd632415b076ab05f5fa7e4f65c58"),
    ("1.28.6", Mode0_20, "kindest/node:v1.28.6@sha256:e9e59d321795595d0eed0de48ef9fbda50388dc8bd4a9b23fb9bd869f370ec7e"),
    ("1.27.11", Mode0_20, "kindest/node:v1.27.11@sha256:681253009e68069b8e01aad36a1e0fa8cf18bb0ab3e5c4069b2e65cafdd70843"),
    ("1.27.10", Mode0_20, "kindest/node:v1.27.10@sha256:e6b2f72f22a4de7b957cd5541e519a8bef3bae7261dd30c6df34cd9bdd3f8476"),
    ("1.26.14", Mode0_20, "kindest/node:v1.26.14@sha256:5d548739ddef37b9318c70cb977f57bf3e5015e4552be4e27e57280a8cbb8e4f"),
    ("1.26.13", Mode0_20, "kindest/node:v1.26.13@sha256:8cb4239d64ff897e0c21ad19fe1d68c3422d4f3c1c1a734b7ab9ccc76c549605"),
    ("1.25.16", Mode0_20, "kindest/node:v1.25.16@sha256:e8b50f8e06b44bb65a93678a65a26248fae585b3d3c2a669e5ca6c90c69dc519"),
    ("1.24.17", Mode0_20, "kindest/node:v1.24.17@sha256:bad10f9b98d54586cba05a7eaa1b61c6b90bfc4ee174fdc43a7b75ca75c95e51"),
    ("1.23.17", Mode0_20, "kindest/node:v1.23.17@sha256:14d0a9a892b943866d7e6be119a06871291c517d279aedb816a4b4bc0ec0a5b3"),
    ("1.29.1", Mode0_20, "kindest/node:v1.29.1@sha256:a0cc28af37cf39b019e2b448c54d1a3f789de32536cb5a5db61a49623e527144"),
    ("1.28.6", Mode0_20, "kindest/node:v1.28.6@sha256:b7e1cf6b2b729f604133c667a6be8aab6f4dde5bb042c1891ae248d9154f665b"),
    ("1.27.10", Mode0_20, "kindest/node:v1.27.10@sha256:3700c811144e24a6c6181065265f69b9bf0b437c45741017182d7c82b908918f"),
    ("1.26.13", Mode0_20, "kindest/node:v1.26.13@sha256:15ae92d507b7d4aec6e8920d358fc63d3b980493db191d7327541fbaaed1f789"),
    ("1.25.16", Mode0_20, "kindest/node:v1.25.16@sha256:9d0a62b55d4fe1e262953be8d406689b947668626a357b5f9d0cfbddbebbc727"),
    ("1.24.17", Mode0_20, "kindest/node:v1.24.17@sha256:ea292d57ec5dd0e2f3f5a2d77efa246ac883c051ff80e887109fabefbd3125c7"),
    ("1.23.17", Mode0_20, "kindest/node:v1.23.17@sha256:fbb92ac580fce498473762419df27fa8664dbaa1c5a361b5957e123b4035bdcf"),
    ("1.29.0", Mode0_20, "kindest/node:v1.29.0@sha256:eaa1450915475849a73a9227b8f201df25e55e268e5d619312131292e324d570"),
    ("1.28.0", Mode0_20, "kindest/node:v1.28.0@sha256:b7a4cad12c197af3ba43202d3efe03246b3f0793f162afb40a33c923952d5b31"),
    ("1.27.3", Mode0_20, "kindest/node:v1.27.3@sha256:3966ac761ae0136263ffdb6cfd4db23ef8a83cba8a463690e98317add2c9ba72"),
    ("1.26.6", Mode0_20, "kindest/node:v1.26.6@sha256:6e2d8b28a5b601defe327b98bd1c2d1930b49e5d8c512e1895099e4504007adb"),
    ("1.25.11", Mode0_20, "kindest/node:v1.25.11@sha256:227fa11ce74ea76a0474eeefb84cb75d8dad1b08638371ecf0e86259b35be0c8"),
    ("1.24.15", Mode0_20, "kindest/node:v1.24.15@sha256:7db4f8bea3e14b82d12e044e25e34bd53754b7f2b0e9d56df21774e6f66a70ab"),
    ("1.23.17", Mode0_20, "kindest/node:v1.23.17@sha256:59c989ff8a517a93127d4a536e7014d28e235fb3529d9fba91b3951d461edfdb"),
    ("1.22.17", Mode0_20, "kindest/node:v1.22.17@sha256:f5b2e5698c6c9d6d0adc419c0deae21a425c07d81bbf3b6a6834042f25d4fba2"),
    ("1.21.14", Mode0_20, "kindest/node:v1.21.14@sha256:8a4e9bb3f415d2bb81629ce33ef9c76ba514c14d707f9797a01e3216376ba093"),
    ("1.27.1", Mode0_19, "kindest/node:v1.27.1@sha256:b7d12ed662b873bd8510879c1846e87c7e676a79fefc93e17b2a52989d3ff42b"),
    ("1.26.4", Mode0_19, "kindest/node:v1.26.4@sha256:f4c0d87be03d6bea69f5e5dc0adb678bb498a190ee5c38422bf751541cebe92e"),
    ("1.25.9", Mode0_19, "kindest/node:v1.25.9@sha256:c08d6c52820aa42e533b70bce0c2901183326d86dcdcbedecc9343681db45161"),
    ("1.24.13", Mode0_19, "kindest/node:v1.24.13@sha256:cea86276e698af043af20143f4bf0509e730ec34ed3b7fa790cc0bea091bc5dd"),
    ("1.23.17", Mode0_19, "kindest/node:v1.23.17@sha256:f77f8cf0b30430ca4128cc7cfafece0c274a118cd0cdb251049664ace0dee4ff"),
    ("1.22.17", Mode0_19, "kindest/node:v1.22.17@sha256:9af784f45a584f6b28bce2af84c494d947a05bd709151466489008f80a9ce9d5"),
    ("1.21.14", Mode0_19, "kindest/node:v1.21.14@sha256:220cfafdf6e3915fbce50e13d1655425558cb98872c53f802605aa2fb2d569cf"),
    ("1.26.3", Mode0_19, "kindest/node:v1.26.3@sha256:61b92f38dff6ccc29969e7aa154d34e38b89443af1a2c14e6cfbd2df6419c66f"),
    ("1.25.8", Mode0_19, "kindest/node:v1.25.8@sha256:00d3f5314cc35327706776e95b2f8e504198ce59ac545d0200a89e69fce10b7f"),
    ("1.24.12", Mode0_19, "kindest/node:v1.24.12@sha256:1e12918b8bc3d4253bc08f640a231bb0d3b2c5a9b28aa3f2ca1aee93e1e8db16"),
    ("1.23.17", Mode0_19, "kindest/node:v1.23.17@sha256:e5fd1d9cd7a9a50939f9c005684df5a6d145e8d695e78463637b79464292e66c"),
    ("1.22.17", Mode0_19, "kindest/node:v1.22.17@sha256:c8a828709a53c25cbdc0790c8afe12f25538617c7be879083248981945c38693"),
    ("1.21.14", Mode0_19, "kindest/node:v1.21.14@sha256:27ef72ea623ee879a25fe6f9982690a3e370c68286f4356bf643467c552a3888"),
    ("1.27.1", Mode0_19, "kindest/node:v1.27.1@sha256:9915f5629ef4d29f35b478e819249e89cfaffcbfeebda4324e5c01d53d937b09"),
    ("1.27.0", Mode0_19, "kindest/node:v1.27.0@sha256:c6b22e613523b1af67d4bc8a0c38a4c3ea3a2b8fbc5b367ae36345c9cb844518"),
    ("1.25.3", Mode0_19, "kindest/node:v1.25.3@sha256:f52781bc0d7a19fb6c405c2af83abfeb311f130707a0e219175677e366cc45d1"),
    ("1.24.7", Mode0_19, "kindest/node:v1.24.7@sha256:577c630ce8e509131eab1aea12c022190978dd2f745aac5eb1fe65c0807eb315"),
    ("1.23.13", Mode0_19, "kindest/node:v1.23.13@sha256:ef453bb7c79f0e3caba88d2067d4196f427794086a7d0df8df4f019d5e336b61"),
    ("1.22.15", Mode0_19, "kindest/node:v1.22.15@sha256:7d9708c4b0873f0fe2e171e2b1b7f45ae89482617778c1c875f1053d4cef2e41"),
    ("1.21.14", Mode0_19, "kindest/node:v1.21.14@sha256:9d9eb5fb26b4fbc0c6d95fa8c790414f9750dd583f5d7cee45d92e8c26670aa1"),
    ("1.20.15", Mode0_19, "kindest/node:v1.20.15@sha256:a32bf55309294120616886b5338f95dd98a2f7231519c7dedcec32ba29699394"),
    ("1.19.16", Mode0_19, "kindest/node:v1.19.16@sha256:476cb3269232888437b61deca013832fee41f9f074f9bed79f57e4280f7c48b7"),
    ("1.26.0", Mode0_19, "kindest/node:v1.26.0@sha256:691e24bd2417609db7e589e1a479b902d2e209892a10ce375fab60a8407c7352"),
];

/// What the table says for one Machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// The table's image (digest included) when the version or the custom image is in it.
    pub image: Option<&'static str>,
    pub mode: KindMode,
}

/// `major.minor.patch` of a table row (rows are well formed; a test checks every one).
fn row_version(v: &str) -> (u64, u64, u64) {
    let mut it = v.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    (
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
    )
}

/// Upstream's lookup. A custom image equal to a row's image (digest included) takes that row.
/// Otherwise the rows of the same minor, in table order: an exact patch of a release version takes
/// that row; the first row whose patch is below the version's stops the search (a newer patch than
/// the table knows: a best guess, with the mode of the rows seen so far or the latest mode);
/// otherwise the mode of the rows passed over is kept and the search goes on. A version whose minor
/// is absent gets the latest mode and no image.
pub fn lookup(
    (major, minor, patch): (u64, u64, u64),
    prerelease: bool,
    custom_image: Option<&str>,
) -> Mapping {
    if let Some(custom) = custom_image.filter(|c| !c.is_empty())
        && let Some((_, mode, image)) = PREBUILT.iter().find(|(_, _, i)| *i == custom)
    {
        return Mapping {
            image: Some(image),
            mode: *mode,
        };
    }
    let mut guess = Mapping {
        image: None,
        mode: LATEST_MODE,
    };
    for (v, mode, image) in PREBUILT {
        let (ma, mi, pa) = row_version(v);
        if (ma, mi) != (major, minor) {
            continue;
        }
        if pa == patch && !prerelease {
            return Mapping {
                image: Some(image),
                mode: *mode,
            };
        }
        if patch > pa {
            return guess;
        }
        guess.mode = *mode;
    }
    guess
}

/// The tag of a table image (`kindest/node:v1.35.0@sha256:…` → `v1.35.0`).
pub fn image_tag(image: &str) -> &str {
    let no_digest = image.split('@').next().unwrap_or(image);
    no_digest.rsplit_once(':').map_or(no_digest, |(_, t)| t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_upstreams_whole_table() {
        assert_eq!(PREBUILT.len(), 103);
        assert_eq!(PREBUILT.iter().filter(|r| r.1 == Mode0_19).count(), 23);
        for (v, _, image) in PREBUILT {
            assert_eq!(v.split('.').count(), 3, "{v}");
            assert!(v.split('.').all(|p| p.parse::<u64>().is_ok()), "{v}");
            assert!(image.starts_with("kindest/node:v1."), "{image}");
            let digest = image.split_once("@sha256:").map(|(_, d)| d).unwrap();
            assert_eq!(digest.len(), 64, "{image}");
        }
        // The newest and the oldest of upstream v1.14.2.
        assert_eq!(PREBUILT[0].0, "1.37.0");
        assert_eq!(PREBUILT[102].0, "1.26.0");
    }

    #[test]
    fn exact_versions_take_their_row() {
        let m = lookup((1, 35, 0), false, None);
        assert_eq!(m.mode, Mode0_20);
        assert_eq!(image_tag(m.image.unwrap()), "v1.35.0");
        // A version built by kind v0.19 only (and first listed there).
        let m = lookup((1, 27, 1), false, None);
        assert_eq!(m.mode, Mode0_19);
        assert_eq!(image_tag(m.image.unwrap()), "v1.27.1");
        // Built by several kind releases: the first (newest) row wins.
        let m = lookup((1, 23, 17), false, None);
        assert_eq!(
            m.image.unwrap(),
            "kindest/node:v1.23.17@sha256:14d0a9a892b943866d7e6be119a06871291c517d279aedb816a4b4bc0ec0a5b3"
        );
        assert_eq!(m.mode, Mode0_20);
        assert_eq!(
            image_tag(lookup((1, 19, 16), false, None).image.unwrap()),
            "v1.19.16"
        );
    }

    #[test]
    fn unknown_versions_are_a_best_guess() {
        // Newer patch than any row of its minor: no image, latest mode.
        assert_eq!(
            lookup((1, 35, 9), false, None),
            Mapping {
                image: None,
                mode: Mode0_20
            }
        );
        // A prerelease of a known version is not that version.
        assert_eq!(lookup((1, 35, 0), true, None).image, None);
        // Unknown minor.
        assert_eq!(
            lookup((1, 40, 0), false, None),
            Mapping {
                image: None,
                mode: LATEST_MODE
            }
        );
        // Between rows of a minor only kind v0.19 built: the mode of the rows passed over.
        // 1.20: only 1.20.15 (v0.19) -> 1.20.3 passes it and ends with its mode.
        assert_eq!(
            lookup((1, 20, 3), false, None),
            Mapping {
                image: None,
                mode: Mode0_19
            }
        );
        // 1.27.2: the first 1.27 row is 1.27.16 (v0.20, passed over), then 1.27.13, 1.27.11,
        // 1.27.10, 1.27.3 (all v0.20), then 1.27.1: 2 > 1 stops with the mode seen so far.
        assert_eq!(lookup((1, 27, 2), false, None).mode, Mode0_20);
        // 1.26.1 passes 1.26.4 and 1.26.3 (v0.19) and stops at 1.26.0: kind v0.19's mode.
        assert_eq!(
            lookup((1, 26, 1), false, None),
            Mapping {
                image: None,
                mode: Mode0_19
            }
        );
    }

    #[test]
    fn custom_image_in_the_table_takes_its_mode() {
        let img = "kindest/node:v1.27.1@sha256:b7d12ed662b873bd8510879c1846e87c7e676a79fefc93e17b2a52989d3ff42b";
        let m = lookup((1, 35, 0), false, Some(img));
        assert_eq!(
            m,
            Mapping {
                image: Some(PREBUILT.iter().find(|r| r.2 == img).unwrap().2),
                mode: Mode0_19
            }
        );
        // Not in the table (no digest): the version decides.
        assert_eq!(
            lookup((1, 27, 1), false, Some("kindest/node:v1.27.1")).mode,
            Mode0_19
        );
        assert_eq!(lookup((1, 35, 0), false, Some("my/node:x")).mode, Mode0_20);
    }

    #[test]
    fn tags() {
        assert_eq!(image_tag("kindest/node:v1.35.0@sha256:abc"), "v1.35.0");
        assert_eq!(image_tag("reg:5000/kindest/node:v1.35.0"), "v1.35.0");
    }
}
