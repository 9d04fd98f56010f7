//! Runs TLC on every small model of specs/models.toml: each correct
//! specification must pass and each broken variant must be refuted by one of
//! the invariants the manifest names. Needs Java and tla2tools.jar
//! (scripts/setup.sh installs both); a missing TLC fails the test with the
//! runner's one-line error rather than skipping it.

use pmsim_specs::{check_model, default_dir, default_workers, manifest, select, Expect, Selection, Status, Tlc};
use std::collections::BTreeMap;

#[test]
fn small_models_pass_and_broken_variants_are_refuted() {
    let root = default_dir();
    let all = manifest::load(&root).expect("models.toml");
    let models = select(&all, &Selection::default());
    let tlc = Tlc::locate().unwrap_or_else(|e| panic!("{e}"));
    // Every specification folder has a small model that passes and one that is refuted.
    let mut kinds: BTreeMap<&str, (bool, bool)> = BTreeMap::new();
    for m in &models {
        let k = kinds.entry(m.dir.as_str()).or_default();
        match m.expect {
            Expect::Pass => k.0 = true,
            Expect::Refuted => k.1 = true,
        }
    }
    assert_eq!(kinds.len(), 3, "three specifications: {kinds:?}");
    assert!(kinds.values().all(|&(p, r)| p && r), "each needs a passing and a refuted small model: {kinds:?}");

    // One TLC per core at a time, each with one worker: small models take
    // seconds, most of it the JVM's start and warm-up.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..default_workers() {
            s.spawn(|| {
                while let Some(m) = models.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                    let r = check_model(&tlc, &root, m, 1).unwrap_or_else(|e| panic!("{}: {e}", m.name));
                    eprintln!(
                        "{:<40} {:?} {:?} states, {:.1}s {:?}",
                        r.name, r.status, r.distinct, r.seconds, r.violated
                    );
                    let want = match m.expect {
                        Expect::Pass => Status::Pass,
                        Expect::Refuted => Status::Refuted,
                    };
                    if r.status != want || r.distinct.is_none() {
                        let f = format!("{}: {:?} ({})", r.name, r.status, r.reason.unwrap_or_default());
                        failures.lock().unwrap().push(f);
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The runner can fail: a model that TLC refutes but the manifest expects to
/// pass is UNEXPECTED, and so is a broken variant refuted by another invariant.
#[test]
fn an_outcome_other_than_the_expected_one_is_unexpected() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("counter");
    std::fs::create_dir_all(&spec).unwrap();
    std::fs::create_dir_all(dir.path().join("shared")).unwrap();
    std::fs::write(
        spec.join("Counter.tla"),
        "---- MODULE Counter ----\nEXTENDS Naturals\nVARIABLE x\nInit == x = 0\nNext == x' = (x + 1) % 4\n\
         Small == x < 3\nTypeOK == x \\in Nat\n====\n",
    )
    .unwrap();
    std::fs::write(spec.join("Counter.cfg"), "INIT Init\nNEXT Next\nINVARIANTS TypeOK Small\n").unwrap();
    std::fs::write(
        dir.path().join("models.toml"),
        "[[model]]\nname = \"a\"\ndir = \"counter\"\nmodule = \"Counter\"\ncfg = \"Counter.cfg\"\nsize = \"small\"\n\
         expect = \"pass\"\n\n[[model]]\nname = \"b\"\ndir = \"counter\"\nmodule = \"Counter\"\ncfg = \"Counter.cfg\"\n\
         size = \"small\"\nexpect = \"refuted\"\nviolates = [\"TypeOK\"]\n",
    )
    .unwrap();
    let models = manifest::load(dir.path()).unwrap();
    let tlc = Tlc::locate().unwrap_or_else(|e| panic!("{e}"));
    for m in &models {
        let r = check_model(&tlc, dir.path(), m, 1).unwrap();
        assert_eq!(r.status, Status::Unexpected, "{}: {r:?}", m.name);
        assert_eq!(r.violated.as_deref(), Some("Small"));
        assert_eq!(r.trace, Some(4));
    }
}

#[test]
fn a_manifest_naming_a_missing_file_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("models.toml"),
        "[[model]]\nname = \"x\"\ndir = \"nowhere\"\nmodule = \"X\"\ncfg = \"X.cfg\"\nsize = \"small\"\nexpect = \"pass\"\n",
    )
    .unwrap();
    let e = manifest::load(dir.path()).unwrap_err();
    assert!(e.contains("model x") && e.contains("does not exist"), "{e}");
}
