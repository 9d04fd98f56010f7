//! Sweeps on disk: shards merged equal an unsharded run; killed runs leave
//! complete rows and `--resume` completes them; corrupt rows and foreign
//! experiments are refused.

use pmsim_analyses::store::{self, SweepDir};
use pmsim_analyses::sweep::{self, Options, Shard};
use pmsim_analyses::{Experiment, Row};
use std::fs;

/// Six cheap single-threaded points (single-threaded: a multi-threaded
/// point's trace order depends on the interleaving).
const EXP: &str = r#"
[experiment]
name = "small"
mode = "sim"
[sweep]
alloc = ["base", "nvalloc-log"]
workload = ["threadtest", "larson-small"]
stripes = [1, 8]
"param.publish" = true
"sim.reflush.threshold" = 4
"#;

fn exp() -> Experiment {
    let mut e = Experiment::from_toml(EXP, "small.toml").unwrap();
    // Fewer iterations: keeps the test to seconds (threadtest only knows
    // `iterations`, so narrow the workload axis to it for that).
    e.set_axis("workload=threadtest").unwrap();
    e.set_axis("param.iterations=3").unwrap();
    e
}

fn opts(shard: Shard, resume: bool) -> Options {
    Options { shard, resume, jobs: 2, tally: Default::default() }
}

fn rows(dir: &SweepDir) -> Vec<Row> {
    store::merge(dir).unwrap().1.iter().map(Row::without_env).collect()
}

#[test]
fn shards_merge_to_the_unsharded_result_and_resume_completes_a_killed_run() {
    let tmp = tempfile::tempdir().unwrap();
    let whole = SweepDir::new(tmp.path().join("whole"));
    let s = sweep::run(&whole, exp(), &opts(Shard::default(), false)).unwrap();
    assert_eq!((s.points, s.ran, s.failed.len()), (4, 4, 0), "{:?}", s.failed);
    let want = rows(&whole);
    assert_eq!(want.len(), 4);
    assert!(want.iter().all(|r| r.result.sim.is_some()));
    assert!(want.windows(2).all(|w| w[0].index < w[1].index));

    let parts = SweepDir::new(tmp.path().join("parts"));
    for i in 0..3 {
        sweep::run(&parts, exp(), &opts(Shard { index: i, count: 3 }, false)).unwrap();
    }
    assert_eq!(fs::read_dir(parts.shards_dir()).unwrap().count(), 3);
    assert_eq!(rows(&parts), want, "shards merged differ from the unsharded run");

    // Running a shard again without --resume is refused.
    let e = sweep::run(&parts, exp(), &opts(Shard { index: 0, count: 3 }, false)).unwrap_err();
    assert!(e.contains("--resume"), "{e}");

    // A killed run: shard 1 lost its last row and left half a line behind.
    let f1 = parts.shard_path(1);
    let text = fs::read_to_string(&f1).unwrap();
    let keep: Vec<&str> = text.lines().collect();
    assert!(!keep.is_empty());
    let torn = &keep[keep.len() - 1][..40];
    fs::write(&f1, format!("{}{torn}", keep[..keep.len() - 1].iter().map(|l| format!("{l}\n")).collect::<String>()))
        .unwrap();
    let (read, warnings) = parts.read_rows().unwrap();
    assert_eq!(read.len(), 3);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let e = store::merge(&parts).unwrap_err();
    assert!(e.contains("1 of 4 points have no row") && e.contains("--resume"), "{e}");
    let s = sweep::run(&parts, exp(), &opts(Shard { index: 1, count: 3 }, true)).unwrap();
    assert_eq!((s.already_done, s.ran), (0, 1));
    assert_eq!(rows(&parts), want, "resumed run differs");
    assert!(fs::read_to_string(&f1).unwrap().ends_with('\n'));
    // Nothing left to do.
    for i in 0..3 {
        let s = sweep::run(&parts, exp(), &opts(Shard { index: i, count: 3 }, true)).unwrap();
        assert_eq!(s.ran, 0);
    }
    // The directory's shard scheme is fixed when it is made: another one is
    // refused (its rows would land in shard files of the first scheme).
    let e = sweep::run(&parts, exp(), &opts(Shard::default(), true)).unwrap_err();
    assert!(e.contains("split into 3 shard(s)"), "{e}");

    // Another experiment in the same directory is refused.
    let mut other = exp();
    other.set_axis("stripes=2").unwrap();
    let e = sweep::run(&parts, other, &opts(Shard { index: 0, count: 3 }, true)).unwrap_err();
    assert!(e.contains("holds another experiment"), "{e}");

    // A flipped byte inside a complete row is corruption, not a torn row.
    let text = fs::read_to_string(&f1).unwrap();
    fs::write(&f1, text.replacen("\"threads\":1", "\"threads\":7", 1)).unwrap();
    let e = store::merge(&parts).unwrap_err();
    assert!(e.contains("1.jsonl: line 1: row checksum mismatch"), "{e}");
}

#[test]
fn bad_experiments_name_the_file_and_key() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("bad.toml");
    fs::write(&p, "[sweep]\nalloc = [\"nvalloc-log\"]\nstripez = [1, 2]\n").unwrap();
    let e = Experiment::from_file(&p).unwrap_err();
    assert!(e.starts_with(&format!("{}: ", p.display())) && e.contains("'stripez'"), "{e}");
    fs::write(&p, "[sweep]\nthreads = [\"many\"]\n").unwrap();
    let e = Experiment::from_file(&p).unwrap_err();
    assert!(e.contains("'threads'"), "{e}");
    fs::write(&p, "[sweep]\nmode = \"fast\"\n").unwrap();
    assert!(Experiment::from_file(&p).unwrap_err().contains("'mode'"));
    assert!("3/3".parse::<Shard>().is_err() && "1/0".parse::<Shard>().is_err());
    assert_eq!("1/4".parse::<Shard>(), Ok(Shard { index: 1, count: 4 }));
}
