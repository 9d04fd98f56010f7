//! The heap file: creation, roots, clean shutdown, remapping, and the errors a
//! wrong file gets.

use pmsim_model::fault_in::FaultIn;
use pmsim_model::heap::{HEADER_SIZE, LAYOUT_VERSION, MIN_SIZE, ROOT_SLOTS};
use pmsim_model::{FlushInsn, Heap, HeapErrorKind, HeapOptions, Pm, PmOff};
use std::path::{Path, PathBuf};

const SIZE: u64 = 1 << 20;

fn dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// The clean-shutdown flag (bytes 24..28; 28..32 are the header's checksum).
fn clean_flag_on_disk(path: &Path) -> u32 {
    let bytes = std::fs::read(path).unwrap();
    u32::from_le_bytes(bytes[24..28].try_into().unwrap())
}

/// Opens `path` expecting an error; returns its kind and its message.
fn open_err(path: &Path) -> (HeapErrorKind, String) {
    let e = Heap::open(path).expect_err("open should fail");
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "error is not one line: {msg:?}");
    assert!(msg.starts_with(&path.display().to_string()), "error does not name the file: {msg}");
    (e.kind, msg)
}

fn make_heap(path: &Path, size: u64) {
    Heap::create(path, size).unwrap().close().unwrap();
}

#[test]
fn roots_and_data_survive_close_and_reopen() {
    let d = dir();
    let path = d.path().join("x.heap");
    let heap = Heap::create(&path, SIZE).unwrap();
    assert!(heap.was_clean(), "a new heap has nothing to recover");
    assert_eq!(heap.size(), SIZE);
    assert_eq!(heap.user_range(), HEADER_SIZE..SIZE);
    {
        let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
        let mut t = pm.thread(0);
        t.store_bytes(HEADER_SIZE, b"hello, persistent world");
        t.persist(HEADER_SIZE, 23);
        t.set_root(0, HEADER_SIZE);
        t.set_root(ROOT_SLOTS - 1, SIZE - 8);
        t.store_u64(SIZE - 8, 0xfeed);
        t.persist(SIZE - 8, 8);
        assert_eq!(t.root(0), HEADER_SIZE);
    }
    assert_eq!(heap.root(0), HEADER_SIZE);
    heap.close().unwrap();

    let heap = Heap::open(&path).unwrap();
    assert!(heap.was_clean());
    assert_eq!(heap.root(0), HEADER_SIZE);
    assert_eq!(heap.root(1), 0, "untouched roots are empty");
    assert_eq!(heap.root(ROOT_SLOTS - 1), SIZE - 8);
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let t = pm.thread(0);
    let mut buf = [0u8; 23];
    t.load_bytes(heap.root(0), &mut buf);
    assert_eq!(&buf, b"hello, persistent world");
    assert_eq!(t.load_u64(heap.root(ROOT_SLOTS - 1)), 0xfeed);
}

#[test]
fn offsets_survive_a_different_mapping_address() {
    let d = dir();
    let a = d.path().join("a.heap");
    let heap = Heap::create(&a, SIZE).unwrap();
    let node: PmOff<[u64; 2]> = PmOff::new(HEADER_SIZE + 128);
    {
        let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
        let mut t = pm.thread(0);
        // A two-node list linked by offsets: node -> node2 -> null.
        let node2: PmOff<[u64; 2]> = node.add(4);
        t.write(node, [node2.get(), 11]);
        t.write(node2, [0, 22]);
        t.persist(node.get(), 16 * 5);
        t.set_root(3, node.get());
    }
    heap.close().unwrap();

    // Map a copy while the original is mapped too: two live mappings of the
    // same bytes cannot share an address.
    let b = d.path().join("b.heap");
    std::fs::copy(&a, &b).unwrap();
    let ha = Heap::open(&a).unwrap();
    let hb = Heap::open(&b).unwrap();
    assert_ne!(ha.base(), hb.base());
    for heap in [&ha, &hb] {
        let pm = Pm::native(heap, FlushInsn::best()).unwrap();
        let t = pm.thread(0);
        let mut values = Vec::new();
        let mut at: PmOff<[u64; 2]> = PmOff::new(heap.root(3));
        while !at.is_null() {
            let [next, v] = t.read(at);
            values.push(v);
            at = PmOff::new(next);
        }
        assert_eq!(values, [11, 22]);
        // Pointer and offset conversions agree in each mapping.
        let p = heap.ptr(node);
        assert_eq!(p as usize, heap.base() as usize + node.get() as usize);
        assert_eq!(heap.off(p as *const [u64; 2]), node);
    }
}

#[test]
fn clean_flag_follows_close_and_crash() {
    let d = dir();
    let path = d.path().join("c.heap");
    let heap = Heap::create(&path, SIZE).unwrap();
    assert_eq!(clean_flag_on_disk(&path), 0, "in use");
    heap.close().unwrap();
    assert_eq!(clean_flag_on_disk(&path), 1, "closed cleanly");

    let heap = Heap::open(&path).unwrap();
    assert!(heap.was_clean());
    assert_eq!(clean_flag_on_disk(&path), 0, "open clears the flag while the heap is in use");
    drop(heap); // a crash: no close

    let heap = Heap::open(&path).unwrap();
    assert!(!heap.was_clean(), "drop without close must look like a crash");
    heap.close().unwrap();
    let heap = Heap::open(&path).unwrap();
    assert!(heap.was_clean());
}

#[test]
fn create_refuses_an_existing_file_unless_asked_to_overwrite() {
    let d = dir();
    let path = d.path().join("e.heap");
    let heap = Heap::create(&path, SIZE).unwrap();
    {
        let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
        pm.thread(0).set_root(5, 12345);
    }
    heap.close().unwrap();

    let e = Heap::create(&path, SIZE).unwrap_err();
    assert_eq!(e.kind, HeapErrorKind::Exists);
    assert_eq!(e.to_string(), format!("{}: already exists (ask to overwrite it to replace it)", path.display()));
    assert_eq!(Heap::open(&path).unwrap().root(5), 12345, "the refused create left the heap alone");

    let opts = HeapOptions { overwrite: true, ..HeapOptions::default() };
    let heap = Heap::create_with(&path, 2 * SIZE, &opts).unwrap();
    assert_eq!(heap.size(), 2 * SIZE);
    assert_eq!(heap.root(5), 0, "an overwritten heap starts empty");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 2 * SIZE);
}

#[test]
fn create_rejects_impossible_sizes_and_leaves_no_file() {
    let d = dir();
    for size in [0, 4096, MIN_SIZE + 1] {
        let path = d.path().join(format!("s{size}.heap"));
        let e = Heap::create(&path, size).unwrap_err();
        assert_eq!(e.kind, HeapErrorKind::BadSize, "{e}");
        assert!(!path.exists());
    }
    let sparse = HeapOptions { sparse: true, populate: true, ..HeapOptions::default() };
    Heap::create_with(d.path().join("min.heap"), MIN_SIZE, &sparse).unwrap().close().unwrap();
}

/// A CPU profile's prefault brings every page of a mapping's prefix in
/// (`mincore` finds them resident; none of a fresh anonymous mapping was
/// before, none past the prefix), and on a heap it changes no byte; a
/// length past the heap's end faults in all of it; ranges fault in their
/// pages only.
#[test]
fn prefault_brings_every_page_in_and_changes_nothing() {
    let len = SIZE as usize;
    let resident = |p: *mut libc::c_void| {
        let mut v = vec![0u8; len / 4096];
        // SAFETY: `p` is a page-aligned mapping of `len` bytes; `v` has a byte per page.
        assert_eq!(unsafe { libc::mincore(p, len, v.as_mut_ptr()) }, 0);
        v.iter().filter(|&&b| b & 1 == 1).count()
    };
    // SAFETY: a fresh private anonymous mapping, unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    assert_eq!(resident(p), 0);
    pmsim_model::fault_in::prefault(p.cast(), SIZE / 4).unwrap();
    assert_eq!(resident(p), len / 4 / 4096, "a prefix faults in that prefix only");
    // Ranges (a run that reached two places, LLFree's threads' trees): those
    // pages only, a range past the end cut at it.
    let ranges = FaultIn::from_ranges([SIZE / 2..SIZE / 2 + 8192, SIZE - 4096..SIZE + (1 << 30)]);
    // SAFETY: the writable mapping of SIZE bytes made above.
    unsafe { ranges.apply(p.cast(), SIZE) }.unwrap();
    assert_eq!(resident(p), len / 4 / 4096 + 3, "ranges fault in their pages only");
    pmsim_model::fault_in::prefault(p.cast(), SIZE).unwrap();
    assert_eq!(resident(p), len / 4096);
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(p, len) };

    let d = dir();
    let heap = Heap::create(d.path().join("p.heap"), SIZE).unwrap();
    let before: Vec<u64> = (0..ROOT_SLOTS).map(|i| heap.root(i)).collect();
    heap.prefault(&FaultIn::prefix(SIZE / 2)).unwrap();
    heap.prefault(&FaultIn::all()).unwrap();
    assert_eq!((0..ROOT_SLOTS).map(|i| heap.root(i)).collect::<Vec<_>>(), before);
    heap.close().unwrap();
}

#[test]
fn wrong_magic_is_not_a_heap() {
    let d = dir();
    let path = d.path().join("junk.heap");
    std::fs::write(&path, vec![0x42u8; 8192]).unwrap();
    let (kind, msg) = open_err(&path);
    assert_eq!(kind, HeapErrorKind::BadMagic);
    assert_eq!(msg, format!("{}: not a pmsim heap (bad magic)", path.display()));

    std::fs::write(&path, b"").unwrap();
    let (kind, msg) = open_err(&path);
    assert_eq!(kind, HeapErrorKind::BadMagic);
    assert!(msg.ends_with("not a pmsim heap (file is only 0 bytes)"), "{msg}");
}

#[test]
fn truncated_files_are_named_as_such() {
    let d = dir();
    let path = d.path().join("t.heap");
    make_heap(&path, 64 << 20);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(4096).unwrap();
    let (kind, msg) = open_err(&path);
    assert_eq!(kind, HeapErrorKind::SizeMismatch);
    assert_eq!(msg, format!("{}: file is 4096 bytes but the header says 67108864", path.display()));

    f.set_len(100).unwrap();
    let (kind, msg) = open_err(&path);
    assert_eq!(kind, HeapErrorKind::Truncated);
    assert!(msg.ends_with("truncated: file is 100 bytes, shorter than the 4096-byte heap header"), "{msg}");
}

fn patch(path: &PathBuf, at: usize, bytes: &[u8]) {
    let mut data = std::fs::read(path).unwrap();
    data[at..at + bytes.len()].copy_from_slice(bytes);
    std::fs::write(path, data).unwrap();
}

#[test]
fn header_damage_is_refused_and_old_headers_open() {
    let d = dir();
    let path = d.path().join("h.heap");
    make_heap(&path, SIZE);
    let good = std::fs::read(&path).unwrap();
    // Every single-byte change of the header's first 64 bytes, and of the
    // reserved tail, is refused with one line naming the file.
    for at in (0..64).chain([600, 4095]) {
        let mut b = good.clone();
        b[at] ^= 0x10;
        std::fs::write(&path, &b).unwrap();
        let (_, msg) = open_err(&path);
        assert!(msg.starts_with(&format!("{}: ", path.display())), "byte {at}: {msg}");
    }
    // A heap written before the checksum (its high word 0) still opens.
    let mut b = good.clone();
    b[28..32].fill(0);
    std::fs::write(&path, &b).unwrap();
    Heap::open(&path).unwrap();
}

#[test]
fn newer_layout_versions_are_refused() {
    let d = dir();
    let path = d.path().join("v.heap");
    make_heap(&path, SIZE);
    patch(&path, 8, &(LAYOUT_VERSION + 1).to_le_bytes());
    let (kind, msg) = open_err(&path);
    assert_eq!(kind, HeapErrorKind::NewerVersion);
    assert!(msg.ends_with(&format!(
        "heap layout version {} is newer than this pmsim supports ({LAYOUT_VERSION})",
        LAYOUT_VERSION + 1
    )));

    patch(&path, 8, &0u32.to_le_bytes());
    assert_eq!(open_err(&path).0, HeapErrorKind::Corrupt);
}

#[test]
fn missing_and_doubly_opened_heaps() {
    let d = dir();
    let path = d.path().join("none.heap");
    let (kind, msg) = open_err(&path);
    assert_eq!(kind, HeapErrorKind::Io);
    assert!(msg.ends_with("no such heap file"));

    make_heap(&path, SIZE);
    let first = Heap::open(&path).unwrap();
    let (kind, msg) = open_err(&path);
    assert_eq!(kind, HeapErrorKind::Locked, "{msg}");
    drop(first);
    Heap::open(&path).unwrap();
}

#[test]
fn close_refuses_while_persistence_handles_live() {
    let d = dir();
    let path = d.path().join("u.heap");
    let heap = Heap::create(&path, SIZE).unwrap();
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let e = heap.close().unwrap_err();
    assert_eq!(e.kind, HeapErrorKind::InUse);
    assert!(e.to_string().contains("1 persistence handle(s)"), "{e}");
    drop(pm);
    // The refused close left the heap unclean, as a crash would.
    let heap = Heap::open(&path).unwrap();
    assert!(!heap.was_clean());
}

#[test]
fn pm_offsets_behave_like_typed_pointers() {
    let p: PmOff<u64> = PmOff::new(4096);
    assert_eq!(p.add(3).get(), 4096 + 24);
    assert_eq!(p.byte_add(3).get(), 4099);
    assert_eq!(p.cast::<u8>().add(3).get(), 4099);
    assert!(PmOff::<u64>::NULL.is_null());
    assert_eq!(PmOff::<u64>::default(), PmOff::NULL);
    assert_eq!(format!("{p:?}"), "PmOff(0x1000)");
    assert_eq!(std::mem::size_of::<PmOff<[u8; 100]>>(), 8);
    assert_eq!(u64::from(p), 4096);
}

/// A private copy is reverted page by page to what the file holds now:
/// its own writes go, the file's later changes show, its header reads as
/// `open_copy` reads it; not while a handle uses it, never on a shared heap.
#[test]
fn a_private_copy_reverts_to_the_file() {
    let d = dir();
    let path = d.path().join("h");
    let mut shared = Heap::create(&path, SIZE).unwrap();
    // SAFETY: offsets inside the heaps, which this test alone uses.
    let byte = |h: &Heap, off: u64| unsafe { *h.base().add(off as usize) };
    // SAFETY: as above.
    let set = |h: &Heap, off: u64, v: u8| unsafe { *h.base().add(off as usize) = v };
    set(&shared, 8192, 1);
    let mut copy = Heap::open_copy(&path).unwrap();
    assert_eq!(byte(&copy, 8192), 1);
    set(&copy, 8192, 2);
    set(&copy, 3 * 4096, 9);
    assert_eq!((byte(&shared, 8192), byte(&copy, 8192)), (1, 2));
    copy.revert_copy().unwrap();
    assert_eq!((byte(&copy, 8192), byte(&copy, 3 * 4096)), (1, 0), "the copy's writes are gone");
    set(&shared, 8192, 3);
    assert_eq!(byte(&copy, 8192), 3, "an untouched page shows the file as it is now");
    assert!(!copy.was_clean(), "the file's header says unclean (the shared heap is open)");
    let pm = Pm::native(&copy, FlushInsn::None).unwrap();
    assert_eq!(copy.revert_copy().unwrap_err().kind, HeapErrorKind::InUse);
    drop(pm);
    copy.revert_copy().unwrap();
    assert_eq!(shared.revert_copy().unwrap_err().kind, HeapErrorKind::InUse);
    drop(copy);
    shared.close().unwrap();
}

/// A heap larger than the free space of its tmpfs is refused at creation
/// with one line, and no file is left: the file stays sparse, so the
/// space is checked rather than reserved, and a store must never find it
/// missing later (SIGBUS).
#[test]
fn a_heap_larger_than_the_free_tmpfs_is_refused_at_creation() {
    use std::os::unix::fs::MetadataExt;
    let shm = Path::new("/dev/shm");
    // SAFETY: `statfs` is plain integers, for which all zeroes are valid.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    let path = std::ffi::CString::new("/dev/shm").unwrap();
    // SAFETY: statfs fills the struct we pass from a NUL-terminated path.
    let statted = unsafe { libc::statfs(path.as_ptr(), &mut fs) } == 0;
    assert!(statted && fs.f_type == libc::TMPFS_MAGIC, "/dev/shm is not a tmpfs");
    let d = tempfile::tempdir_in(shm).unwrap();
    let free = fs.f_bavail as u64 * fs.f_bsize as u64;
    let too_big = (free + (1 << 30)).next_multiple_of(4096);
    let p = d.path().join("big.heap");
    let e = Heap::create(&p, too_big).unwrap_err();
    assert_eq!(e.kind, HeapErrorKind::Io, "{e}");
    assert!(e.to_string().contains(&format!("cannot reserve {too_big} bytes")), "{e}");
    assert!(e.to_string().contains("No space left on device"), "{e}");
    assert!(!p.exists());
    // One that fits is made sparse: its blocks are taken as it is written.
    let heap = Heap::create(&p, 64 << 20).unwrap();
    assert!(std::fs::metadata(&p).unwrap().blocks() * 512 < 1 << 20);
    heap.close().unwrap();
}
