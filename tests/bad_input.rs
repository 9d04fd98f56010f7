//! Nothing the user had is lost: a table of bad inputs, each run through the
//! `pmsim` binary (some on a disk that fills up, via `RLIMIT_FSIZE`), each
//! expected to fail with one line on stderr matching a pattern, within a
//! time limit (a hang is a failure), leaving every file of the working
//! directory byte-identical and no new file behind. Then the
//! things a table cannot say: two writers at once, and what SIGTERM and
//! SIGKILL leave in /dev/shm.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const PMSIM: &str = env!("CARGO_BIN_EXE_pmsim");
const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/samples/threadtest-nvalloc-log.pmt");

/// Runs pmsim in `dir`, killing it after `limit` (a hang fails the test).
fn run_in(dir: &Path, args: &[String], limit: Duration) -> Output {
    run_as(dir, args, limit, &Setup::default())
}

/// How a case's process differs from a plain run.
#[derive(Clone, Copy, Default)]
struct Setup {
    /// A disk that is full after this many bytes of any one file
    /// (`RLIMIT_FSIZE`, with SIGXFSZ ignored so that writes fail with EFBIG
    /// as they would with ENOSPC, instead of killing the process).
    full_after: Option<u64>,
    /// One environment variable set (e.g. a `PATH` without Slurm).
    env: Option<(&'static str, &'static str)>,
}

fn run_as(dir: &Path, args: &[String], limit: Duration, setup: &Setup) -> Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(PMSIM);
    cmd.args(args).current_dir(dir).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some((k, v)) = setup.env {
        cmd.env(k, v);
    }
    if let Some(bytes) = setup.full_after {
        // SAFETY: setrlimit and signal are async-signal-safe, as pre_exec requires.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                Ok(())
            });
        }
    }
    let child = cmd.spawn().expect("pmsim starts");
    wait_limited(child, limit, args)
}

fn wait_limited(mut child: Child, limit: Duration, what: &[String]) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("pmsim {what:?} did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every file under `dir` (recursively) with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut m = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                m.insert(p.clone(), b"<dir>".to_vec());
                todo.push(p);
            } else if t.is_symlink() {
                let to = std::fs::read_link(&p).unwrap();
                m.insert(p.clone(), format!("<link to {}>", to.display()).into_bytes());
            } else if !t.is_file() {
                // A FIFO is recorded, never read (reading it would block).
                m.insert(p.clone(), b"<special>".to_vec());
            } else {
                m.insert(p.clone(), std::fs::read(&p).unwrap_or_default());
            }
        }
    }
    m
}

/// The inputs the cases use, made once: a trace, a small trace with values
/// and its heap image (with header-damaged copies), a finished sweep, files
/// an output must not replace.
fn fixture(d: &Path) {
    let run = |args: &[&str]| {
        let o = run_in(d, &args.iter().map(|s| s.to_string()).collect::<Vec<_>>(), Duration::from_secs(300));
        assert!(o.status.success(), "fixture {args:?}: {}", stderr(&o));
    };
    std::fs::copy(SAMPLE, d.join("t.pmt")).unwrap();
    // The user's files named like the side files pmsim once made beside an
    // output (`.NAME.PID.tmp`, `.NAME.PID.old/`) and like its staging
    // directories (`.pmsim-PID-…`), of a dead pid: the runs below write
    // v.pmt beside them, and every case after must leave them too.
    let dead = (1000..4_000_000u32).rev().find(|p| !Path::new(&format!("/proc/{p}")).exists()).unwrap();
    let side = [format!(".v.pmt.{dead}.tmp"), format!(".v.pmt.{dead}.old/notes"), format!(".pmsim-{dead}-mine/notes")];
    for f in &side {
        std::fs::create_dir_all(d.join(f).parent().unwrap()).unwrap();
        std::fs::write(d.join(f), "the user's").unwrap();
    }
    for f in ["old.txt", "old.py", "old.csv", "old.json", "v2.pmt.img"] {
        std::fs::write(d.join(f), format!("{f}: the user's\n")).unwrap();
    }
    std::fs::create_dir(d.join("full")).unwrap();
    std::fs::write(d.join("full/keep.html"), "mine").unwrap();
    run(&[
        "run",
        "--alloc",
        "nvalloc-log",
        "--workload",
        "threadtest",
        "--param",
        "objects=40",
        "--param",
        "iterations=1",
        "--heap-size",
        "8M",
        "--trace",
        "v.pmt",
        "--values",
    ]);
    for f in &side {
        assert_eq!(std::fs::read(d.join(f)).ok().as_deref(), Some(&b"the user's"[..]), "{f} written over");
    }
    let img = std::fs::read(d.join("v.pmt.img")).unwrap();
    // Single-byte changes of the header fields the old check let through:
    // the clean flag, the checksum, reserved bytes, a root out of the heap.
    for (name, at, val) in [("clean", 24, 7u8), ("crc", 30, 0x5a), ("res", 40, 1), ("root", 71, 0x40), ("tail", 700, 9)]
    {
        let mut b = img.clone();
        b[at] ^= val;
        std::fs::write(d.join(format!("hdr-{name}.img")), b).unwrap();
    }
    std::fs::write(d.join("short.img"), &img[..4096]).unwrap();
    run(&["sweep", "--set", "param.iterations=1", "--set", "param.objects=20", "--out", "sw", "--jobs", "1"]);
    // A copy whose experiment.json was edited by hand, twice over.
    for (copy, edit) in [("sw-edited", "points"), ("sw-named", "name")] {
        let o = Command::new("cp").args(["-r", "sw", copy]).current_dir(d).status().unwrap();
        assert!(o.success());
        let p = d.join(copy).join("experiment.json");
        let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        match edit {
            "points" => v["points"][0]["point"]["seed"] = 7.into(),
            _ => v["experiment"]["meta"]["name"] = "../../victim".into(),
        }
        std::fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    }
    // A sweep with a row twice, and one with a row in a shard it does not belong to.
    for copy in ["sw-twice", "sw-stray"] {
        let o = Command::new("cp").args(["-r", "sw", copy]).current_dir(d).status().unwrap();
        assert!(o.success());
        let shard = d.join(copy).join("shards/0.jsonl");
        let rows = std::fs::read(&shard).unwrap();
        match copy {
            "sw-twice" => std::fs::write(&shard, [rows.as_slice(), rows.as_slice()].concat()).unwrap(),
            _ => std::fs::write(d.join(copy).join("shards/1.jsonl"), &rows).unwrap(),
        }
    }
    // A trace whose header names an allocator and a workload with an escape
    // sequence, a newline and a bell (Valgrind's tracer takes any name).
    let o = Command::new(PMSIM)
        .args(["trace-exec", "-o", "esc.pmt", "--values", "--allocator", "\x1b[31mevil\nline", "--workload", "w\x07"])
        .args(["--example", "pmdk-threadtest", "--", "1", "10", "64", "1"])
        .env("PMSIM_CACHE_DIR", PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pmsim-cache"))
        .current_dir(d)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // A model manifest that is a device.
    std::fs::create_dir(d.join("specs-dev")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", d.join("specs-dev/models.toml")).unwrap();
    // A sweep whose Slurm script name is taken by a directory.
    let o = Command::new("cp").args(["-r", "sw", "sw-slurm"]).current_dir(d).status().unwrap();
    assert!(o.success());
    std::fs::create_dir_all(d.join("sw-slurm/slurm/array.sh")).unwrap();
    std::fs::create_dir_all(d.join("sw-slurm/slurm/logs")).unwrap();
    std::fs::write(d.join("sw-slurm/.lock.submit"), "").unwrap();
    // A program to trace (trace-exec must never write over it).
    std::fs::copy("/bin/true", d.join("prog")).unwrap();
    // gem5's output directory of an earlier export.
    std::fs::create_dir(d.join("g.m5out")).unwrap();
    std::fs::write(d.join("g.m5out/stats.txt"), "the user's").unwrap();
    std::fs::write(d.join("nosweep.toml"), "[experiment]\nname = \"x\"\n").unwrap();
    std::fs::write(d.join("empty.toml"), "").unwrap();
    std::fs::write(d.join("victim.toml"), "[experiment]\nname = \"../../victim\"\n[sweep]\nstripes = [1]\n").unwrap();
    // Files of the user's where pmsim puts its side files, and links.
    std::fs::write(d.join(".lockd.pmt.lock"), "the user's").unwrap();
    std::os::unix::fs::symlink("old.txt", d.join(".linkl.pmt.lock")).unwrap();
    std::os::unix::fs::symlink("old.txt", d.join("hlink")).unwrap();
    std::fs::write(d.join("h.heap"), "the user's heap").unwrap();
    std::fs::create_dir_all(d.join("notes/results")).unwrap();
    std::fs::write(d.join("notes/README.md"), "the user's").unwrap();
    std::fs::write(d.join("notes/index.html"), "the user's").unwrap();
    std::fs::write(d.join("notes/results/a.csv"), "the user's").unwrap();
    // Inputs of the wrong kind.
    let fifo = std::ffi::CString::new(d.join("fifo").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: a valid path, NUL-terminated.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    std::fs::write(d.join("dup.toml"), "[sweep]\nseed = [1, 1]\n").unwrap();
    std::fs::write(d.join("esc.toml"), "[experiment]\nname = \"\x1b[31mred\"\n[sweep\n").unwrap();
    std::fs::write(d.join("bytes.toml"), b"[experiment]\nname = \"\xff\xfe\"\n").unwrap();
    std::fs::write(d.join("empty.json"), "").unwrap();
    std::fs::write(d.join("foreign.json"), "{\"a\": 1}\n").unwrap();
    let o = Command::new(PMSIM).args(["sim", "t.pmt", "--json"]).current_dir(d).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(d.join("r.json"), &o.stdout).unwrap();
    for (name, key, val) in
        [("rs.json", "reflushes", serde_json::json!("many")), ("rn.json", "reflush_ratio", serde_json::json!(-0.5))]
    {
        let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["overall"][key] = val;
        std::fs::write(d.join(name), serde_json::to_vec(&v).unwrap()).unwrap();
    }
}

/// Inputs kept outside the working directory (the snapshot would read them
/// every case): a sparse text file past the 64 MiB bound. `BIG` in a case's
/// arguments names it.
fn outside(x: &Path) -> PathBuf {
    let big = x.join("big.toml");
    std::fs::File::create(&big).unwrap().set_len(65 << 20).unwrap();
    big
}

/// One bad input: the arguments (run in the fixture directory) and the
/// pieces the one error line must contain.
struct Case {
    what: &'static str,
    args: &'static str,
    expect: &'static [&'static str],
    setup: Setup,
}

const RUN: &str = "run --alloc nvalloc-log --workload threadtest --param objects=20 --param iterations=1";
/// A run that runs out of heap part-way (with `--heap-size 5M`).
const OOM: &str =
    "run --alloc nvalloc-log --workload threadtest --param objects=2000 --param size=4096 --param iterations=1";

fn cases() -> Vec<Case> {
    // `c!([setup] what, args, expected…)`: a case run as `setup` says.
    macro_rules! c {
        ([$setup:expr] $what:expr, $args:expr, $($e:expr),+) => {
            Case { what: $what, args: $args, expect: &[$($e),+], setup: $setup }
        };
        ($what:expr, $args:expr, $($e:expr),+) => { c!([Setup::default()] $what, $args, $($e),+) };
    }
    // On a disk full after `bytes` bytes of a file; with `k` set to `v`.
    let full = |bytes| Setup { full_after: Some(bytes), env: None };
    let env = |k, v| Setup { full_after: None, env: Some((k, v)) };
    vec![
        // Silent overwrites.
        c!("run --values over an existing .img", "RUN --trace v2.pmt --values", "v2.pmt.img", "already exists"),
        c!("export --out over a file", "export t.pmt --format gem5 --out old.txt", "old.txt", "already exists"),
        c!(
            "export --gem5-config over a file",
            "export t.pmt --format gem5 --out new.txt --gem5-config old.py",
            "old.py",
            "already exists"
        ),
        // A --gem5-config no one may write beside (/proc refuses new files,
        // to root too, where a mode would not): the export fails before its
        // outputs, and the user's --out, forced, stays as it was.
        c!(
            "export --gem5-config into an unwritable directory",
            "export t.pmt --format gem5 --out old.txt --force --gem5-config /proc/pmsim-gem5.py",
            "/proc/pmsim-gem5.py",
            "cannot create"
        ),
        c!("sim --access-map over a file", "sim t.pmt --access-map old.csv", "old.csv", "already exists"),
        c!("merge --csv over a file", "sweep merge sw --csv old.csv", "old.csv", "already exists"),
        c!("merge --json over a file", "sweep merge sw --json old.json", "old.json", "already exists"),
        c!("merge --report into a full directory", "sweep merge sw --report full", "full", "not empty"),
        c!("export over its own input", "export t.pmt --format gem5 --out t.pmt --force", "t.pmt", "input"),
        c!("run --trace and --heap one file", "RUN --trace same.bin --heap same.bin", "same.bin", "twice"),
        c!(
            "merge --csv into the shards",
            "sweep merge sw --csv sw/shards/0.jsonl --force",
            "sw/shards/0.jsonl",
            "shard directory"
        ),
        c!("merge --csv as a new shard", "sweep merge sw --csv sw/shards/9.jsonl", "shard directory"),
        c!("merge --json over experiment.json", "sweep merge sw --json sw/experiment.json --force", "input"),
        c!("merge --report into the sweep", "sweep merge sw --report sw --force", "sweep directory"),
        c!("run --trace a device", "RUN --trace /dev/full --force", "/dev/full", "not a regular file"),
        c!("export --out a device", "export t.pmt --format gem5 --out /dev/null --force", "not a regular file"),
        c!("export --out a directory", "export t.pmt --format gem5 --out full --force", "not a regular file"),
        c!("export into a missing directory", "export t.pmt --format gem5 --out no/such.txt", "no/such.txt"),
        c!("trace-exec -o over a file", "trace-exec -o old.txt -- /bin/true", "old.txt", "already exists"),
        c!("trace-exec -o over the program", "trace-exec --force -o prog -- ./prog", "prog", "input of this command"),
        c!([env("GEM5", "/bin/false")] "export --run-gem5 over gem5's earlier output",
            "export t.pmt --format gem5 --out g --run-gem5",
            "g.m5out",
            "already exists"
        ),
        c!(
            "slurm --dry-run over a directory",
            "sweep --resume sw-slurm --slurm --dry-run",
            "slurm/array.sh",
            "not a regular file"
        ),
        // A full disk: the write fails, the old file stays, nothing is left.
        c!([full(64 << 10)] "export on a full disk",
            "export t.pmt --format gem5 --out old.txt --force",
            "old.txt",
            "too large"
        ),
        c!([full(4096)] "sim --access-map on a full disk",
            "sim t.pmt --access-map old.csv --force",
            "old.csv",
            "too large"
        ),
        c!([full(4096)] "merge --json on a full disk", "sweep merge sw --json old.json --force", "old.json", "too large"),
        c!([full(10 << 20)] "run --trace --values on a full disk",
            "run --alloc nvalloc-log --workload threadtest --heap-size 8M --trace v2.pmt --values --force",
            "v2.pmt",
            "too large"
        ),
        // A sweep refused for other reasons than its parameters leaves no directory.
        c!([full(200)] "a sweep on a full disk", "sweep --set seed=1 --out d", "d/experiment.json", "too large"),
        c!([env("PATH", "/nonexistent")] "sweep --slurm without Slurm",
            "sweep --set seed=1 --slurm --out d",
            "sbatch"
        ),
        c!("sweep --slurm --tasks 0", "sweep --set seed=1 --slurm --tasks 0 --out d", "--tasks must be at least 1"),
        // Path traversal.
        c!("an experiment named ../../victim", "sweep victim.toml --out d", "victim.toml", "plain file name"),
        c!("merge --report of a sweep named ../..", "sweep merge sw-named --report rep", "plain file name"),
        // Checked when the command starts, not when a point runs.
        c!("sweep stripes=100", "sweep --set alloc=nvalloc-log --set stripes=100 --out d", "stripes = 100"),
        c!("sweep stripes=0", "sweep --set alloc=nvalloc-log --set stripes=0 --out d", "stripes = 0"),
        c!("sweep su=-1", "sweep --set alloc=nvalloc-log --set su=-1 --out d", "su"),
        c!("sweep su=2", "sweep --set alloc=nvalloc-log --set su=2 --out d", "su"),
        c!("sweep --set 1,,2", "sweep --set stripes=1,,2 --out d", "empty value"),
        c!("sweep --set with no value", "sweep --set stripes= --out d", "no values"),
        c!("sweep --set alloc twice", "sweep --set alloc=base --set alloc=nvalloc-log --out d", "twice"),
        c!("sweep threads=100000", "sweep --set threads=100000 --out d", "100000 threads"),
        c!("sweep threads=0", "sweep --set threads=0 --out d", "threads"),
        c!("sweep --jobs 100000", "sweep --set seed=1 --jobs 100000 --out d", "--jobs 100000"),
        c!("sweep of nothing", "sweep --out d", "nothing to sweep"),
        c!("an empty experiment file", "sweep empty.toml --out d", "empty.toml", "[sweep]"),
        c!("a TOML without [sweep]", "sweep nosweep.toml --out d", "nosweep.toml", "[sweep]"),
        c!("--resume after editing experiment.json", "sweep --resume sw-edited", "experiment.json", "edited by hand"),
        c!("--resume with another experiment", "sweep --set seed=2 --resume sw", "sw", "another experiment"),
        c!("--resume of a sweep with a row twice", "sweep --resume sw-twice", "0.jsonl", "two rows"),
        c!("--resume of a sweep with a stray row", "sweep --resume sw-stray", "1.jsonl", "belongs to shard 0"),
        c!("a model manifest that is a device", "specs check --dir specs-dev", "models.toml", "not a regular file"),
        c!("crash --every 0", "crash v.pmt --every 0", "--every", "out of range"),
        c!("crash --bound 0", "crash v.pmt --bound 0", "--bound", "out of range"),
        c!("crash --image without --point", "crash v.pmt --image 3", "required", "--point"),
        c!("run --threads 100000", "run --alloc makalu --workload threadtest --threads 100000", "100000 threads"),
        c!("run --threads 0", "RUN --threads 0", "at least 1"),
        // Inputs of the wrong kind, refused at once.
        c!("crash --heap-image /dev/zero", "crash v.pmt --heap-image /dev/zero", "/dev/zero", "not a regular file"),
        c!("crash --heap-image a directory", "crash v.pmt --heap-image full", "not a regular file"),
        c!("crash --heap-image too short", "crash v.pmt --heap-image short.img", "short.img", "does not match"),
        c!("heap header: clean flag", "crash v.pmt --heap-image hdr-clean.img", "hdr-clean.img", "clean-shutdown"),
        c!("heap header: checksum", "crash v.pmt --heap-image hdr-crc.img", "hdr-crc.img", "checksum"),
        c!("heap header: reserved", "crash v.pmt --heap-image hdr-res.img", "hdr-res.img", "reserved byte 40"),
        c!("heap header: root", "crash v.pmt --heap-image hdr-root.img", "hdr-root.img", "root 0"),
        c!("heap header: reserved tail", "crash v.pmt --heap-image hdr-tail.img", "hdr-tail.img", "reserved byte 700"),
        // Replace on success only: a run that fails leaves the old outputs byte-identical.
        c!(
            "a failed run --trace v.pmt --values --force",
            "OOM --heap-size 5M --trace v.pmt --values --force",
            "no memory"
        ),
        c!("a failed run --heap h.heap --force", "OOM --heap-size 5M --heap h.heap --force", "no memory"),
        c!("a failed traced run leaves no partial image", "OOM --heap-size 5M --trace y.pmt --values", "no memory"),
        c!(
            "a failed traced Metall run leaves no image files",
            "run --alloc metall --workload threadtest --param objects=4000 --param size=4096 --param iterations=1 \
             --heap-size 8M --trace y.pmt --values",
            "no memory"
        ),
        c!([env("GEM5", "/bin/false")] "export --run-gem5 with a failing gem5",
            "export t.pmt --format gem5 --out g2 --run-gem5",
            "gem5 failed"
        ),
        c!([env("GEM5", "/nonexistent")] "export --run-gem5 without gem5",
            "export t.pmt --format gem5 --out g2 --run-gem5",
            "/nonexistent"
        ),
        // Side files: the user's lock file, a lock file that is a link, an output that is a link.
        c!("the user's .lockd.pmt.lock", "RUN --trace lockd.pmt", ".lockd.pmt.lock", "not a pmsim lock file"),
        c!("a lock file that is a link", "RUN --trace linkl.pmt", ".linkl.pmt.lock", "symbolic link"),
        c!("--heap a link --force", "RUN --heap hlink --force", "hlink", "symbolic link"),
        c!("export --out a link --force", "export t.pmt --format gem5 --out hlink --force", "hlink", "symbolic link"),
        // Output directories that hold the user's files, and another sweep's bookkeeping.
        c!("reproduce --out the user's directory", "reproduce --scale tiny --out notes", "notes", "not empty"),
        c!("reproduce --out .", "reproduce --scale tiny --out .", "not empty"),
        c!("sweep --out the user's directory", "sweep --set seed=1 --out notes", "notes", "not empty"),
        c!("sweep --out inside a sweep", "sweep --set seed=1 --out sw/shards/9.jsonl", "inside the pmsim sweep"),
        c!(
            "a second shard scheme in one sweep",
            "sweep --set param.iterations=1 --set param.objects=20 --out sw --shard 2/4",
            "shard"
        ),
        c!("a second shard scheme on --resume", "sweep --resume sw --shard 1/3", "sw", "shard"),
        // Parameters checked up front, once.
        c!("--param given twice", "RUN --param objects=30", "objects=20", "objects=30", "twice"),
        c!(
            "an allocator key given twice",
            "run --alloc nvalloc-log:stripes=2:stripes=8 --workload threadtest",
            "stripes=2",
            "stripes=8"
        ),
        c!("a calibration point key twice", "calibrate --point threads=1,threads=2", "threads=1", "threads=2"),
        c!(
            "a reflush point with a key it does not take",
            "calibrate --point family=reflush,access=64",
            "family=reflush",
            "access=64"
        ),
        c!("--stripes and --set stripes", "RUN --stripes 2 --set stripes=8", "stripes=2", "stripes=8", "twice"),
        c!(
            "--stripes that the allocator's own stripes override",
            "run --alloc nvalloc-log:stripes=2 --workload threadtest --stripes 8",
            "stripes=8",
            "nvalloc-log:stripes=2",
            "twice"
        ),
        c!("run --threads 2,2", "RUN --threads 2,2", "--threads", "listed twice"),
        c!("run --alloc listed twice", "run --alloc nvalloc-log,nvalloc-log --workload threadtest", "listed twice"),
        c!(
            "run --workload reached twice",
            "run --alloc nvalloc-log --workload larson,larson-small",
            "larson-small",
            "listed twice"
        ),
        c!("a sweep value twice", "sweep --set seed=1,1 --out d", "listed twice"),
        c!("an allocator twice in a sweep", "sweep --set alloc=nvalloc-log,nvalloc-log --out d", "listed twice"),
        c!("a TOML sweep value twice", "sweep dup.toml --out d", "dup.toml", "listed twice"),
        c!(
            "iterations=0",
            "run --alloc nvalloc-log --workload threadtest --param iterations=0",
            "iterations = 0",
            "at least 1"
        ),
        c!("bench --runs 0", "bench --runs 0", "--runs", "out of range"),
        c!("bench --events 0", "bench --events 0", "--events", "out of range"),
        c!("bench --events 2^64-1", "bench --events 18446744073709551615", "--events", "out of range"),
        c!("bench --events 10^10", "bench --events 10000000000", "--events", "out of range"),
        c!("specs check --workers 0", "specs check --workers 0", "--workers", "out of range"),
        c!("specs check --workers 100000", "specs check --workers 100000", "--workers", "out of range"),
        c!("crash --recovery-bound 0", "crash v.pmt --recovery-crashes 1 --recovery-bound 0", "out of range"),
        c!("crash --recovery-bound alone", "crash v.pmt --recovery-bound 8", "--recovery-crashes"),
        c!("crash --bound 2^64-1", "crash v.pmt --bound 18446744073709551615", "--bound", "out of range"),
        c!("crash --jobs 0", "crash v.pmt --jobs 0", "--jobs", "out of range"),
        c!("crash --per-path 0", "crash v.pmt --per-path 0", "--per-path", "out of range"),
        c!("sim --access-map-n without --access-map", "sim t.pmt --access-map-n 5", "--access-map"),
        c!("trace dump --thread of none", "trace dump t.pmt --thread 99999", "99999"),
        c!("calibrate --max-fitted-error NaN", "calibrate --max-fitted-error NaN", "NaN"),
        c!(
            "reproduce --traced a missing report",
            "reproduce --scale tiny --out nd --traced nvalloc-log@threadtest=missing.json",
            "missing.json"
        ),
        c!(
            "reproduce --traced an empty report",
            "reproduce --scale tiny --out nd --traced nvalloc-log@threadtest=empty.json",
            "empty.json"
        ),
        c!(
            "reproduce --traced a foreign report",
            "reproduce --scale tiny --out nd --traced nvalloc-log@threadtest=foreign.json",
            "foreign.json",
            "not a pmsim"
        ),
        c!("slurm --time malformed", "sweep --set seed=1 --slurm --dry-run --time 99:99:99:99 --out d", "--time"),
        c!(
            "slurm --partition malformed",
            "sweep --set seed=1 --slurm --dry-run --partition a;b --out d",
            "--partition"
        ),
        c!("specs validate --const TLC cannot parse", "specs validate v.pmt --const Variant=}}}", "--const"),
        c!("specs validate --dir without the specs", "specs validate v.pmt --dir full", "full/", "no such file"),
        c!(
            "diff --fail-if one bound twice",
            "diff t.pmt t.pmt --fail-if flushes>+5% --fail-if flushes>+10%",
            "flushes>+5%",
            "flushes>+10%",
            "twice"
        ),
        c!(
            "trace-exec a program that fails before mapping PM",
            "trace-exec -o new.pmt -- /bin/false",
            "/bin/false",
            "exited with status 1"
        ),
        // Inputs of the wrong kind, refused at once.
        c!("trace info a FIFO", "trace info fifo", "fifo", "not a regular file"),
        c!("sim a FIFO", "sim fifo", "fifo", "not a regular file"),
        c!("crash a FIFO", "crash fifo", "fifo", "not a regular file"),
        c!("export a FIFO", "export fifo --format gem5 --out new.txt", "fifo", "not a regular file"),
        c!("trace dump a FIFO", "trace dump fifo", "fifo", "not a regular file"),
        c!("lint a FIFO", "lint fifo", "fifo", "not a regular file"),
        c!("diff a FIFO", "diff fifo r.json", "fifo", "not a regular file"),
        c!("specs validate a FIFO", "specs validate fifo", "fifo", "not a regular file"),
        c!("bench --trace a FIFO", "bench --trace fifo", "fifo", "not a regular file"),
        c!("an experiment that is a device", "sweep /dev/zero --out d", "/dev/zero", "not a regular file"),
        c!("a --config that is a device", "sim t.pmt --config /dev/urandom", "/dev/urandom", "not a regular file"),
        c!("a --config that is a FIFO", "sim t.pmt --config fifo", "fifo", "not a regular file"),
        c!("run --sim a device", "RUN --sim /dev/zero", "/dev/zero", "not a regular file"),
        c!("an experiment past 64 MiB", "sweep BIG --out d", "big.toml", "64 MiB"),
        c!("a --config past 64 MiB", "sim t.pmt --config BIG", "big.toml", "64 MiB"),
        c!("diff a report with a string figure", "diff r.json rs.json", "rs.json", "not a number"),
        c!("diff a report with a negative figure", "diff r.json rn.json", "rn.json", "at least 0"),
        c!("an experiment with an escape byte", "sweep esc.toml --out d", "esc.toml"),
        c!("an experiment that is not UTF-8", "sweep bytes.toml --out d", "bytes.toml", "UTF-8"),
        c!("crash a trace of an allocator named with escapes", "crash esc.pmt", "\\u{1b}[31mevil\\nline"),
        c!("specs validate a trace named with escapes", "specs validate esc.pmt", "esc.pmt", "\\u{1b}[31mevil"),
    ]
}

#[test]
fn bad_inputs_are_one_line_and_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let d = &tmp.path().join("w");
    std::fs::create_dir(d).unwrap();
    let x = tmp.path().join("x");
    std::fs::create_dir(&x).unwrap();
    fixture(d);
    let big = outside(&x);
    let lookalikes = ScratchLookalikes::new(d);
    let devices = ["/dev/full", "/dev/null", "/dev/zero"];
    let mut failures = Vec::new();
    for case in cases() {
        let before = snapshot(d);
        let args: Vec<String> = case
            .args
            .replace("RUN", RUN)
            .replace("OOM", OOM)
            .replace("BIG", &big.to_string_lossy())
            .split_whitespace()
            .map(String::from)
            .collect();
        let o = run_as(d, &args, Duration::from_secs(60), &case.setup);
        let err = stderr(&o);
        let mut bad = Vec::new();
        if o.status.code() != Some(1) {
            bad.push(format!("exit status {:?}, expected 1", o.status.code()));
        }
        if err.trim_end().lines().count() != 1 || !err.starts_with("pmsim: error: ") {
            bad.push("not one error line".into());
        }
        if err.trim_end().chars().any(|c| c.is_control()) {
            bad.push("a control character in the error line".into());
        }
        for e in case.expect {
            if !err.contains(e) {
                bad.push(format!("no {e:?} in the error"));
            }
        }
        let after = snapshot(d);
        for (p, b) in &before {
            match after.get(p) {
                None => bad.push(format!("{} removed", p.display())),
                Some(a) if a != b => bad.push(format!("{} changed", p.display())),
                _ => {}
            }
        }
        for p in after.keys().filter(|p| !before.contains_key(*p)) {
            bad.push(format!("{} left behind", p.display()));
        }
        for dev in devices {
            use std::os::unix::fs::FileTypeExt;
            if !std::fs::metadata(dev).is_ok_and(|m| m.file_type().is_char_device()) {
                bad.push(format!("{dev} is no longer a device"));
            }
        }
        if !bad.is_empty() {
            failures.push(format!(
                "{} (pmsim {}): {}\n    stderr: {}",
                case.what,
                case.args,
                bad.join("; "),
                err.trim_end()
            ));
        }
    }
    failures.extend(lookalikes.lost());
    assert!(failures.is_empty(), "{} case(s) failed:\n{}", failures.len(), failures.join("\n"));
}

/// Files of the user's named like pmsim's scratch (`pmsim-PID-…` of a
/// process that is not alive, and of pid 1, which is) in /dev/shm and the
/// temporary directory, and a heap kept there on purpose with `--heap`:
/// every command of the table runs with them present, and none may touch them.
struct ScratchLookalikes {
    files: Vec<(PathBuf, Vec<u8>)>,
    dirs: Vec<PathBuf>,
}

impl ScratchLookalikes {
    fn new(work: &Path) -> Self {
        let me = std::process::id();
        // A pid no process has: the cleaner's test of "dead" holds for it.
        let dead = (1000..4_000_000u32).rev().find(|p| !Path::new(&format!("/proc/{p}")).exists()).unwrap();
        let mut files = Vec::new();
        let mut dirs = Vec::new();
        for root in [PathBuf::from("/dev/shm"), std::env::temp_dir()] {
            for pid in [1, dead] {
                let dir = root.join(format!("pmsim-{pid}-results{me}"));
                std::fs::create_dir_all(&dir).unwrap();
                let f = dir.join("data.csv");
                std::fs::write(&f, "the user's").unwrap();
                files.push((f, b"the user's".to_vec()));
                dirs.push(dir);
                let f = root.join(format!("pmsim-{pid}-notes{me}.txt"));
                std::fs::write(&f, "the user's").unwrap();
                files.push((f, b"the user's".to_vec()));
            }
        }
        let heap = PathBuf::from(format!("/dev/shm/pmsim-{dead}-keep{me}.heap"));
        let args: Vec<String> =
            format!("{RUN} --heap-size 8M --heap {}", heap.display()).split_whitespace().map(String::from).collect();
        let o = run_in(work, &args, Duration::from_secs(120));
        assert!(o.status.success(), "a kept heap: {}", stderr(&o));
        files.push((heap.clone(), std::fs::read(&heap).unwrap()));
        ScratchLookalikes { files, dirs }
    }

    /// What is gone or changed.
    fn lost(&self) -> Vec<String> {
        self.files
            .iter()
            .filter(|(p, b)| std::fs::read(p).ok().as_ref() != Some(b))
            .map(|(p, _)| format!("the user's {} (named like scratch) removed or changed", p.display()))
            .collect()
    }
}

impl Drop for ScratchLookalikes {
    fn drop(&mut self) {
        for (p, _) in &self.files {
            let _ = std::fs::remove_file(p);
        }
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn spawn_in(dir: &Path, args: &[&str]) -> Child {
    Command::new(PMSIM)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pmsim starts")
}

/// Waits until `ready` holds (or panics after a minute).
fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Two writers of one output: exactly one succeeds; the other, refused while
/// the first runs, names its pid (or, if the first had already finished,
/// finds the output there). The first must run well past the moment the
/// second looks (a holder seen writing is watched for 300 ms before the
/// refusal, as a holder signalled a moment ago is about to say it is ending).
fn exactly_one_writer(dir: &Path, args: [&[&str]; 2], lock: &Path) {
    let a = spawn_in(dir, args[0]);
    let pid = a.id();
    wait_for("the first writer's lock", || {
        std::fs::read_to_string(lock).is_ok_and(|s| s.lines().next() == Some(pid.to_string().as_str()))
    });
    let b = run_in(dir, &args[1].iter().map(|s| s.to_string()).collect::<Vec<_>>(), Duration::from_secs(120));
    let a = wait_limited(a, Duration::from_secs(300), &[]);
    assert!(a.status.success(), "first writer: {}", stderr(&a));
    assert!(!b.status.success(), "two writers of one output both succeeded");
    let e = stderr(&b);
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(e.contains(&format!("being written by another pmsim (pid {pid})")) || e.contains("already exists"), "{e}");
}

#[test]
fn one_writer_per_trace_and_per_sweep_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let run: Vec<&str> =
        "run --alloc nvalloc-log --workload threadtest --param iterations=100 --trace one.pmt".split(' ').collect();
    exactly_one_writer(d, [&run, &run], &d.join(".one.pmt.lock"));
    let o = run_in(d, &["trace".into(), "info".into(), "one.pmt".into()], Duration::from_secs(60));
    assert!(o.status.success(), "the trace written is whole: {}", stderr(&o));

    // Writers of different kinds: a run tracing into two.pmt and an export into it.
    let run2: Vec<&str> =
        "run --alloc nvalloc-log --workload threadtest --param iterations=100 --trace two.pmt".split(' ').collect();
    let export = ["export", SAMPLE, "--format", "gem5", "--out", "two.pmt", "--force"];
    exactly_one_writer(d, [&run2, &export], &d.join(".two.pmt.lock"));

    // A run tracing into a .csv, and the commands that write a .csv: the
    // simulator's access map, a sweep's merged table (below).
    let run3: Vec<&str> =
        "run --alloc nvalloc-log --workload threadtest --param iterations=100 --trace three.csv".split(' ').collect();
    let access_map = ["sim", SAMPLE, "--access-map", "three.csv", "--force"];
    exactly_one_writer(d, [&run3, &access_map], &d.join(".three.csv.lock"));

    let a = ["sweep", "--set", "param.iterations=1,2,3,4,5,6", "--jobs", "1", "--out", "sw"];
    let b = ["sweep", "--set", "param.iterations=7", "--out", "sw"];
    exactly_one_writer(d, [&a, &b], &d.join("sw/.lock"));
    let o = run_in(d, &["sweep".into(), "merge".into(), "sw".into()], Duration::from_secs(60));
    assert!(o.status.success(), "the first sweep's rows merge: {}", stderr(&o));
    let run4: Vec<&str> =
        "run --alloc nvalloc-log --workload threadtest --param iterations=100 --trace four.csv".split(' ').collect();
    let merge = ["sweep", "merge", "sw", "--csv", "four.csv", "--force"];
    exactly_one_writer(d, [&run4, &merge], &d.join(".four.csv.lock"));
}

/// The scratch files of process `pid` in /dev/shm and the temporary directory.
fn scratch_of(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("pmsim-{pid}-");
    [PathBuf::from("/dev/shm"), std::env::temp_dir()]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|rd| rd.flatten().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix)))
        .collect()
}

/// Starts `args`, waits until it has a scratch file, sends `sig`; returns its pid.
fn signal_mid_run(dir: &Path, args: &[&str], sig: i32) -> u32 {
    let mut c = spawn_in(dir, args);
    let pid = c.id();
    wait_for("a scratch heap", || !scratch_of(pid).is_empty() || c.try_wait().unwrap().is_some());
    assert!(c.try_wait().unwrap().is_none(), "{args:?} ended before it could be signalled");
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(pid as i32, sig) };
    let st = c.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(st.signal(), Some(sig), "{args:?} ended by the signal");
    if sig != libc::SIGKILL {
        // What a worker made while the handler cleaned is removed by the
        // cleaner the handler started, within moments of the process's end.
        let start = Instant::now();
        while !scratch_of(pid).is_empty() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    pid
}

#[test]
fn interrupted_runs_leave_no_scratch_heaps() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let sweep = ["sweep", "--set", "param.iterations=20,21,22,23,24,25,26,27", "--jobs", "1", "--out", "sw"];
    let pid = signal_mid_run(d, &sweep, libc::SIGTERM);
    assert_eq!(scratch_of(pid), Vec::<PathBuf>::new(), "SIGTERM to sweep");

    let o = run_in(
        d,
        &"run --alloc nvalloc-log --workload threadtest --param objects=200 --param iterations=2 --heap-size 8M \
          --trace v.pmt --values"
            .split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>(),
        Duration::from_secs(300),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let pid = signal_mid_run(d, &["crash", "v.pmt", "--bound", "100000"], libc::SIGTERM);
    assert_eq!(scratch_of(pid), Vec::<PathBuf>::new(), "SIGTERM to crash");
    let pid = signal_mid_run(d, &["crash", "v.pmt", "--bound", "100000"], libc::SIGINT);
    assert_eq!(scratch_of(pid), Vec::<PathBuf>::new(), "SIGINT to crash");

    // A traced Metall run (trace, image and image files staged) stopped:
    // nothing of it is left beside the trace.
    let m = tmp.path().join("m");
    std::fs::create_dir(&m).unwrap();
    let metall =
        "run --alloc metall --workload threadtest --param iterations=50 --heap-size 64M --trace m.pmt --values";
    let pid = signal_mid_run(&m, &metall.split(' ').collect::<Vec<_>>(), libc::SIGTERM);
    assert_eq!(scratch_of(pid), Vec::<PathBuf>::new(), "SIGTERM to a traced Metall run");
    let left: Vec<_> = std::fs::read_dir(&m).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "SIGTERM to a traced Metall run left {left:?}");
    // Killed outright, it leaves its lock and staging directory: the same
    // command again takes them over (their process is dead) and succeeds.
    let pid = signal_mid_run(&m, &metall.split(' ').collect::<Vec<_>>(), libc::SIGKILL);
    let o = run_in(&m, &metall.split(' ').map(String::from).collect::<Vec<_>>(), Duration::from_secs(300));
    assert!(o.status.success(), "a rerun after SIGKILL (pid {pid}): {}", stderr(&o));
    let mut left: Vec<_> =
        std::fs::read_dir(&m).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, ["m.pmt", "m.pmt.img", "m.pmt.img.files"], "what the rerun leaves");

    // SIGKILL cannot be caught: the next pmsim removes what it left.
    let pid = signal_mid_run(d, &["sweep", "--resume", "sw", "--jobs", "1"], libc::SIGKILL);
    assert!(!scratch_of(pid).is_empty(), "a killed sweep leaves its scratch heap (else this test proves nothing)");
    let o = run_in(d, &["trace".into(), "info".into(), SAMPLE.into()], Duration::from_secs(60));
    assert!(o.status.success());
    assert_eq!(scratch_of(pid), Vec::<PathBuf>::new(), "the next run removes a killed run's scratch heap");
}

/// Runs `args` in `dir` again and again, each run sent SIGTERM moments after
/// it has taken the lock `lock` (and begun writing), the next started at once
/// (half the time before the killed one has even ended, half just after):
/// no run may be refused, whatever the timing. Then one runs to its end.
/// Whenever no run is left, every file `dir/out` held is whole:
/// byte-identical, or replaced by a whole new copy (JSON that parses, HTML
/// that ends), and nothing is left beside them.
fn rerun_after_sigterm(dir: &Path, args: &[&str], out: &str, lock: &str, rounds: usize) {
    use std::os::unix::process::ExitStatusExt;
    let o = run_in(dir, &args.iter().map(|s| s.to_string()).collect::<Vec<_>>(), Duration::from_secs(300));
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    let out = dir.join(out);
    let lock = out.join(lock);
    let before = snapshot(&out);
    let whole = |what: &str| {
        // What a worker made while the handler cleaned is removed by the
        // cleaner it started, within moments of the process's end.
        let start = Instant::now();
        let mut after = snapshot(&out);
        while after.keys().any(|p| !before.contains_key(p)) && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
            after = snapshot(&out);
        }
        let mut bad = Vec::new();
        for (p, b) in &before {
            let a = after.get(p);
            let is_lock = p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(".lock"));
            let ok = match a {
                None => false,
                Some(a) if a == b || is_lock => true,
                Some(a) => match p.extension().and_then(|e| e.to_str()) {
                    Some("json") => serde_json::from_slice::<serde_json::Value>(a).is_ok(),
                    Some("html") => a.trim_ascii_end().ends_with(b"</html>"),
                    _ => !a.is_empty(),
                },
            };
            if !ok {
                bad.push(format!("{} {}", p.display(), if a.is_none() { "removed" } else { "torn" }));
            }
        }
        bad.extend(after.keys().filter(|p| !before.contains_key(*p)).map(|p| format!("{} left", p.display())));
        assert!(bad.is_empty(), "{args:?} {what}: {bad:?}");
    };
    let mut killed: Option<Child> = None;
    let mut signalled = 0;
    for round in 0..=rounds {
        let mut c = spawn_in(dir, args);
        let pid = c.id().to_string();
        // Not refused: it takes the lock (the killed run, still ending,
        // is waited for), or runs to its end before it can be seen to.
        let start = Instant::now();
        let mut ended = None;
        while !std::fs::read_to_string(&lock).is_ok_and(|s| s.lines().next() == Some(pid.as_str())) {
            if let Some(st) = c.try_wait().unwrap() {
                ended = Some(st);
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "{args:?}: round {round} never took its lock");
            std::thread::sleep(Duration::from_millis(1));
        }
        if let Some(k) = killed.take() {
            let o = wait_limited(k, Duration::from_secs(60), &[]);
            assert!(o.status.signal() == Some(libc::SIGTERM) || o.status.success(), "{:?}", o.status);
        }
        if ended.is_some() || round == rounds {
            let o = wait_limited(c, Duration::from_secs(300), &[]);
            assert!(o.status.success(), "{args:?} round {round}: {}", stderr(&o));
            whole(&format!("round {round}, which ended"));
            continue;
        }
        std::thread::sleep(Duration::from_millis(round as u64 * 7 % 40));
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        signalled += 1;
        if round % 2 == 0 {
            let st = c.wait().unwrap();
            assert!(st.signal() == Some(libc::SIGTERM) || st.success(), "{st:?}");
            whole(&format!("killed in round {round}"));
        } else {
            killed = Some(c);
        }
    }
    assert!(signalled >= rounds / 2, "{args:?}: only {signalled} of {rounds} runs lived to be signalled");
}

/// Rerunning a command right after SIGTERM to it is never refused as "being
/// written by another pmsim" naming the process that was ending: the ending
/// process marks its locks so, and the rerun waits for it.
#[test]
fn a_rerun_right_after_sigterm_is_not_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::create_dir(d.join("exps")).unwrap();
    std::fs::write(
        d.join("exps/t.toml"),
        "[experiment]\nname = \"t\"\nmode = \"sim\"\nfigures = []\n[sweep]\nalloc = [\"nvalloc-log\"]\n\
         workload = [\"threadtest\"]\nthreads = [1]\nseed = [1, 2]\n\"param.iterations\" = [20]\n",
    )
    .unwrap();
    let reproduce = ["reproduce", "--experiments", "exps", "--only", "t", "--out", "rep", "--jobs", "1"];
    rerun_after_sigterm(d, &reproduce, "rep", ".lock", 8);
    let sweep =
        ["sweep", "--set", "param.iterations=20", "--set", "seed=1,2", "--out", "sw", "--resume", "--jobs", "1"];
    rerun_after_sigterm(d, &sweep, "sw", ".lock", 4);
}

/// Every process descended from `pid`, with its command line.
fn descendants(pid: u32) -> Vec<(u32, String)> {
    let parent_of = |p: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        // After the command name, which may hold spaces: state, then ppid.
        stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
    };
    let all: Vec<u32> =
        std::fs::read_dir("/proc").unwrap().flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    let mut out: Vec<(u32, String)> = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for &c in &all {
            if parent_of(c) == Some(p) && !out.iter().any(|(q, _)| *q == c) {
                let cmd = std::fs::read(format!("/proc/{c}/cmdline")).unwrap_or_default();
                out.push((c, String::from_utf8_lossy(&cmd).replace('\0', " ")));
                frontier.push(c);
            }
        }
    }
    out
}

/// Whether `pid` is a live process (a zombie is not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .is_some_and(|zombie| !zombie)
}

/// Entries of /dev/shm and the temporary directory whose names hold one of `pids`.
fn left_in_shm_or_tmp(pids: &[u32]) -> Vec<PathBuf> {
    [PathBuf::from("/dev/shm"), std::env::temp_dir()]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|rd| rd.flatten().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            pids.iter().any(|pid| {
                n.split(|c: char| !c.is_ascii_digit()).any(|part| part == pid.to_string())
                    && (n.starts_with("pmsim-") || n.starts_with("pmdk-"))
            })
        })
        .collect()
}

/// Starts `args` (with the tool cache of the trace-exec tests), waits until
/// a descendant whose command line holds `child` runs, sends `sig`; then
/// pmsim must end by it, no process it started may be alive, and nothing
/// of pmsim's or of its children's may be left in /dev/shm or /tmp.
fn signal_with_children(dir: &Path, args: &[&str], child: &str, sig: i32) {
    let mut c = Command::new(PMSIM)
        .args(args)
        .current_dir(dir)
        .env("PMSIM_CACHE_DIR", PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pmsim-cache"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pmsim starts");
    let pid = c.id();
    // The first run may build Valgrind's tool or the example: minutes.
    let start = Instant::now();
    let mut kids = Vec::new();
    while !kids.iter().any(|(_, cmd): &(u32, String)| cmd.contains(child)) {
        assert!(c.try_wait().unwrap().is_none(), "{args:?} ended before {child} started");
        assert!(start.elapsed() < Duration::from_secs(900), "{child} did not start under {args:?}");
        std::thread::sleep(Duration::from_millis(20));
        kids = descendants(pid);
    }
    std::thread::sleep(Duration::from_millis(300));
    kids = descendants(pid);
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(pid as i32, sig) };
    let o = wait_limited(c, Duration::from_secs(60), &[]);
    use std::os::unix::process::ExitStatusExt;
    assert!(o.status.signal() == Some(sig) || o.status.code().is_some_and(|c| c != 0), "{args:?}: {:?}", o.status);
    let live: Vec<_> = kids.iter().filter(|(p, _)| alive(*p)).collect();
    assert!(live.is_empty(), "{args:?}: still alive after pmsim ended: {live:?}");
    let mut pids: Vec<u32> = kids.iter().map(|(p, _)| *p).collect();
    pids.push(pid);
    // What the handler could not remove while a child still wrote into it,
    // the cleaner it starts removes as soon as pmsim is gone: allow it that.
    let start = Instant::now();
    let mut left = left_in_shm_or_tmp(&pids);
    while !left.is_empty() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
        left = left_in_shm_or_tmp(&pids);
    }
    assert_eq!(left, Vec::<PathBuf>::new(), "{args:?}: left behind");
}

#[test]
fn sigterm_and_sigint_end_valgrind_the_program_and_recovery_processes() {
    let tmp = tempfile::tempdir().unwrap();
    let args = ["trace-exec", "-o", "p.pmt", "--example", "pmdk-threadtest", "--", "100000", "2000", "64", "2"];
    signal_with_children(tmp.path(), &args, "--tool=pmtrace", libc::SIGTERM);
    signal_with_children(tmp.path(), &args, "--tool=pmtrace", libc::SIGINT);
    // The crash explorer recovers PMDK's images in processes of its own.
    let o = Command::new(PMSIM)
        .args(["trace-exec", "-o", "r.pmt", "--values", "--example", "pmdk-threadtest", "--", "1", "10", "64", "1"])
        .env("PMSIM_CACHE_DIR", PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pmsim-cache"))
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    signal_with_children(tmp.path(), &["crash", "r.pmt"], PMSIM, libc::SIGTERM);
}

#[test]
fn sigint_and_sighup_to_specs_check_and_validate_end_tlc() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    signal_with_children(d, &["specs", "check"], "java", libc::SIGINT);
    signal_with_children(d, &["specs", "check"], "java", libc::SIGHUP);
    let run: Vec<String> =
        format!("{RUN} --heap-size 8M --trace v.pmt --values").split_whitespace().map(String::from).collect();
    let o = run_in(d, &run, Duration::from_secs(120));
    assert!(o.status.success(), "{}", stderr(&o));
    signal_with_children(d, &["specs", "validate", "v.pmt"], "java", libc::SIGHUP);
}

/// Output piped into a reader that has gone (`pmsim crash … | head`): a
/// quiet exit with the shell's status for SIGPIPE (141), no panic message,
/// and no scratch file left.
#[test]
fn a_closed_stdout_is_a_quiet_exit() {
    use std::os::fd::{FromRawFd, OwnedFd};
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let args: Vec<String> =
        "run --alloc nvalloc-log --workload threadtest --param objects=50 --param iterations=1 --heap-size 8M \
         --trace v.pmt --values"
            .split_whitespace()
            .map(String::from)
            .collect();
    let o = run_in(d, &args, Duration::from_secs(300));
    assert!(o.status.success(), "{}", stderr(&o));
    let mut fds = [0; 2];
    // SAFETY: pipe fills the two descriptors, which we then own.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: each descriptor is owned once, by the OwnedFd made of it.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    let c = Command::new(PMSIM)
        .args(["crash", "v.pmt", "--every", "8"])
        .current_dir(d)
        .stdin(Stdio::null())
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .spawn()
        .expect("pmsim starts");
    let pid = c.id();
    let o = wait_limited(c, Duration::from_secs(300), &["crash".into()]);
    assert_eq!(o.status.code(), Some(141), "{}", stderr(&o));
    // The explorer's plan line may come out before the pipe breaks; no
    // panic and no error may.
    let e = stderr(&o);
    assert!(!e.contains("panicked") && !e.contains("error"), "{e}");
    assert_eq!(scratch_of(pid), Vec::<PathBuf>::new());
    // Commands that write with `?` see the closed pipe as an error: the same
    // quiet exit, not "error: Broken pipe".
    for args in [
        &["diff", SAMPLE, SAMPLE][..],
        &["trace", "info", SAMPLE],
        &["lint", SAMPLE],
        &["export", SAMPLE, "--format", "gem5", "--out", "x.txt"],
        &["sim", SAMPLE],
        &["trace", "dump", SAMPLE],
    ] {
        let mut fds = [0; 2];
        // SAFETY: pipe fills the two descriptors, which we then own.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: each descriptor is owned once, by the OwnedFd made of it.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        drop(read);
        let o = Command::new(PMSIM).args(args).current_dir(d).stdout(Stdio::from(write)).output().unwrap();
        assert_eq!(o.status.code(), Some(141), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o), "", "{args:?}");
    }
}
