//! The native backend: every flush instruction this CPU has really runs, and
//! what the primitives write is in the file afterwards.

use pmsim_model::heap::HEADER_SIZE;
use pmsim_model::{CpuFeatures, FlushInsn, Heap, OpKind, Pm, PmError, PmOff};

const SIZE: u64 = 1 << 20;

#[test]
fn every_supported_flush_instruction_runs_and_the_data_reaches_the_file() {
    let cpu = CpuFeatures::detect();
    let available = cpu.available();
    assert_eq!(available.last(), Some(&FlushInsn::None), "eADR mode is always available");
    #[cfg(target_arch = "x86_64")]
    assert!(available.contains(&FlushInsn::Clflush), "clflush is part of SSE2");
    let d = tempfile::tempdir().unwrap();
    for insn in available {
        let path = d.path().join(format!("{insn}.heap"));
        let heap = Heap::create(&path, SIZE).unwrap();
        {
            let pm = Pm::native(&heap, insn).unwrap();
            assert_eq!(pm.flush_insn(), insn);
            assert!(!pm.is_traced());
            let mut t = pm.thread(0);
            assert_eq!(t.flush_insn(), insn);
            let base = HEADER_SIZE;
            t.store_u64(base, 0x1111);
            t.flush(base);
            t.fence();
            t.store(base + 9, 0xabcdu16); // unaligned
            t.store_bytes(base + 64, &[7u8; 300]); // spans 5 lines
            t.persist(base + 64, 300);
            t.ntstore_u64(base + 512, 0x2222);
            t.fence();
            assert_eq!(t.cas_u64(base + 520, 0, 0x3333), Ok(0));
            assert_eq!(t.cas_u64(base + 520, 0, 0x4444), Err(0x3333));
            t.flush_range(base + 520, 8);
            t.fence();
            // Framing calls are no-ops natively but must be callable.
            t.op_begin(OpKind::Malloc, 64);
            t.op_end(OpKind::Malloc, base);
            t.marker(1, "phase");
            t.flush_thread();
            t.set_root(0, base);
        }
        heap.close().unwrap();

        let heap = Heap::open(&path).unwrap();
        assert!(heap.was_clean());
        let pm = Pm::native(&heap, insn).unwrap();
        let t = pm.thread(0);
        let base = heap.root(0);
        assert_eq!(base, HEADER_SIZE, "{insn}");
        assert_eq!(t.load_u64(base), 0x1111, "{insn}");
        assert_eq!(t.load::<u16>(base + 9), 0xabcd, "{insn}");
        let mut bytes = [0u8; 300];
        t.load_bytes(base + 64, &mut bytes);
        assert!(bytes.iter().all(|&b| b == 7), "{insn}");
        assert_eq!(t.read(PmOff::<u64>::new(base + 512)), 0x2222, "{insn}");
        assert_eq!(t.load_u64(base + 520), 0x3333, "{insn}");
    }
}

#[test]
fn a_flush_instruction_the_cpu_lacks_is_refused() {
    let no_clwb = CpuFeatures { clwb: false, clflushopt: true, clflush: true };
    let e = FlushInsn::Clwb.check(&no_clwb).unwrap_err();
    assert!(matches!(e, PmError::Unsupported { insn: FlushInsn::Clwb, .. }));
    assert_eq!(e.to_string(), "this CPU has no clwb instruction (available: clflushopt, clflush, none)");
    assert_eq!(no_clwb.best(), FlushInsn::Clflushopt);
    FlushInsn::Clflushopt.check(&no_clwb).unwrap();
    FlushInsn::None.check(&CpuFeatures { clwb: false, clflushopt: false, clflush: false }).unwrap();

    // And on this CPU, through Pm::native, for whatever it lacks.
    let d = tempfile::tempdir().unwrap();
    let heap = Heap::create(d.path().join("r.heap"), SIZE).unwrap();
    for insn in FlushInsn::ALL {
        let made = Pm::native(&heap, insn);
        assert_eq!(made.is_ok(), insn.is_supported(), "{insn}");
    }
}

#[test]
fn flush_instruction_names_parse() {
    for insn in FlushInsn::ALL {
        assert_eq!(insn.name().parse::<FlushInsn>().unwrap(), insn);
        assert_eq!(insn.to_string(), insn.name());
    }
    let e = "clflush2".parse::<FlushInsn>().unwrap_err();
    assert_eq!(e.to_string(), "unknown flush instruction 'clflush2' (expected clwb, clflushopt, clflush or none)");
}

#[test]
#[should_panic(expected = "outside the heap")]
fn stores_outside_the_heap_panic_instead_of_corrupting_memory() {
    let d = tempfile::tempdir().unwrap();
    let heap = Heap::create(d.path().join("b.heap"), SIZE).unwrap();
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    pm.thread(0).store_bytes(SIZE - 4, &[0u8; 8]);
}

#[test]
#[should_panic(expected = "not 8-byte aligned")]
fn atomic_words_must_be_aligned() {
    let d = tempfile::tempdir().unwrap();
    let heap = Heap::create(d.path().join("a.heap"), SIZE).unwrap();
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let _ = pm.thread(0).cas_u64(HEADER_SIZE + 4, 0, 1);
}

#[test]
#[should_panic(expected = "already has a live PmThread")]
fn one_live_handle_per_thread_id() {
    let d = tempfile::tempdir().unwrap();
    let heap = Heap::create(d.path().join("t.heap"), SIZE).unwrap();
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let _a = pm.thread(3);
    let _b = pm.thread(3);
}

#[test]
fn thread_ids_are_reusable_once_dropped() {
    let d = tempfile::tempdir().unwrap();
    let heap = Heap::create(d.path().join("t.heap"), SIZE).unwrap();
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    drop(pm.thread(3));
    let t = pm.thread(3);
    assert_eq!(t.tid(), 3);
    assert_eq!(pm.live_threads(), 1);
}
