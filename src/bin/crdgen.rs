//! Prints our CRDs, or writes them to a directory (one file per CRD):
//!   crdgen                       # all CRDs to stdout, as one multi-document YAML
//!   crdgen config/crd/bases      # one infrastructure.cluster.x-k8s.io_<plural>.yaml per CRD
use std::{fs, path::PathBuf, process::ExitCode};

fn main() -> ExitCode {
    let out_dir = std::env::args().nth(1).map(PathBuf::from);
    for crd in capd::api::crds::all() {
        let yaml = match capd::api::crds::to_yaml(&crd) {
            Ok(y) => y,
            Err(e) => {
                eprintln!("crdgen: cannot serialize {}: {e}", crd.spec.names.plural);
                return ExitCode::FAILURE;
            }
        };
        match &out_dir {
            None => print!("{yaml}"),
            Some(dir) => {
                let path = dir.join(capd::api::crds::file_name(&crd));
                if let Err(e) = fs::create_dir_all(dir).and_then(|_| fs::write(&path, yaml)) {
                    eprintln!("crdgen: cannot write {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    ExitCode::SUCCESS
}
