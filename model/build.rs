//! Links PMDK's libpmemobj (and libpmem, whose `pmem_is_pmem` reports how
//! PMDK will persist) for `pmsim_model::pmdk`, the real peer allocator.
//!
//! pkg-config finds the libraries and their version; without pkg-config the
//! usual library directories are searched. If libpmemobj is not installed
//! the build stops with one message saying how to install it, rather than a
//! linker error about undefined `pmemobj_*` symbols.

use std::path::Path;
use std::process::Command;

const HELP: &str = "pmsim-model links PMDK's libpmemobj (the peer allocator of the NVAlloc paper), \
but it was not found.\n  Debian/Ubuntu: apt-get install libpmemobj-dev libpmempool-dev pkg-config\n  \
or run scripts/setup.sh; or set PMDK_LIB_DIR to the directory holding libpmemobj.so.";

fn pkg_config(args: &[&str]) -> Option<String> {
    let out = Command::new("pkg-config").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PMDK_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let mut version = "unknown".to_string();
    let mut found = false;
    if let Ok(dir) = std::env::var("PMDK_LIB_DIR") {
        found = Path::new(&dir).join("libpmemobj.so").exists();
        if !found {
            eprintln!("error: PMDK_LIB_DIR={dir} holds no libpmemobj.so\n{HELP}");
            panic!("{HELP}");
        }
        println!("cargo:rustc-link-search=native={dir}");
    } else if let Some(libs) = pkg_config(&["--libs-only-L", "libpmemobj"]) {
        for dir in libs.split_whitespace().filter_map(|a| a.strip_prefix("-L")) {
            println!("cargo:rustc-link-search=native={dir}");
        }
        version = pkg_config(&["--modversion", "libpmemobj"]).unwrap_or(version);
        found = true;
    } else {
        for dir in ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib", "/usr/local/lib64"] {
            if Path::new(dir).join("libpmemobj.so").exists() {
                println!("cargo:rustc-link-search=native={dir}");
                found = true;
                break;
            }
        }
    }
    if !found {
        eprintln!("error: {HELP}");
        panic!("{HELP}");
    }
    let pool_lib = pkg_config(&["--exists", "libpmempool"]).is_some()
        || std::env::var("PMDK_LIB_DIR").is_ok_and(|d| Path::new(&d).join("libpmempool.so").exists())
        || ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib", "/usr/local/lib64"]
            .iter()
            .any(|d| Path::new(d).join("libpmempool.so").exists());
    if !pool_lib {
        let help = format!("libpmempool (PMDK's consistency check) was not found.\n{HELP}");
        eprintln!("error: {help}");
        panic!("{help}");
    }
    println!("cargo:rustc-link-lib=dylib=pmemobj");
    // libpmempool: PMDK's consistency check, run on PMDK's crash images.
    println!("cargo:rustc-link-lib=dylib=pmempool");
    println!("cargo:rustc-link-lib=dylib=pmem");
    println!("cargo:rustc-env=PMSIM_PMDK_VERSION={version}");
}
