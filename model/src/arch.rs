//! The machine instructions behind the persistence primitives, and the CPUID
//! probe that says which of them this CPU has.
//!
//! Every `asm!` of the crate lives here so that the unsafe surface is one short
//! file. The wrappers are `#[inline(always)]`: a native `flush` must compile to
//! the bare instruction at the call site, with nothing around it.
//!
//! The asm blocks deliberately do *not* carry `nomem`: the compiler must treat a
//! flush or fence as touching memory, so it cannot sink an earlier store to the
//! mapping below the flush that is meant to write it back.

/// Which cache-line write-back instructions the CPU implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CpuBits {
    pub clwb: bool,
    pub clflushopt: bool,
    pub clflush: bool,
}

/// Reads CPUID: leaf 1 EDX bit 19 (CLFSH), leaf 7 subleaf 0 EBX bit 23
/// (CLFLUSHOPT) and bit 24 (CLWB). std's `is_x86_feature_detected!` does not
/// know `clwb`, so we ask the CPU directly.
#[cfg(target_arch = "x86_64")]
pub(crate) fn probe() -> CpuBits {
    use core::arch::x86_64::{__cpuid, __cpuid_count};
    // SAFETY: CPUID exists on every x86-64 CPU and has no side effects. Newer
    // toolchains declare these intrinsics safe, hence the allow.
    #[allow(unused_unsafe)]
    let (max_leaf, edx1) = unsafe { (__cpuid(0).eax, __cpuid(1).edx) };
    let ebx7 = if max_leaf >= 7 {
        // SAFETY: as above; leaf 7 exists since max_leaf >= 7.
        #[allow(unused_unsafe)]
        unsafe {
            __cpuid_count(7, 0).ebx
        }
    } else {
        0
    };
    CpuBits { clwb: ebx7 >> 24 & 1 == 1, clflushopt: ebx7 >> 23 & 1 == 1, clflush: edx1 >> 19 & 1 == 1 }
}

/// Other architectures: no flush instruction is known, only eADR mode works.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn probe() -> CpuBits {
    CpuBits { clwb: false, clflushopt: false, clflush: false }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::asm;

    /// Writes back the line holding `p` and keeps it cached.
    ///
    /// # Safety
    /// The CPU has CLWB and `p` lies in mapped memory (a flush of an unmapped
    /// address faults like a load).
    #[inline(always)]
    pub(crate) unsafe fn clwb(p: *const u8) {
        asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags));
    }

    /// Writes back and invalidates the line holding `p`; weakly ordered.
    ///
    /// # Safety
    /// The CPU has CLFLUSHOPT and `p` lies in mapped memory.
    #[inline(always)]
    pub(crate) unsafe fn clflushopt(p: *const u8) {
        asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags));
    }

    /// Writes back and invalidates the line holding `p`; ordered with other
    /// clflushes and stores, so it needs no fence to be ordered (but still one to
    /// be known complete).
    ///
    /// # Safety
    /// `p` lies in mapped memory (CLFLUSH itself is part of SSE2, always present).
    #[inline(always)]
    pub(crate) unsafe fn clflush(p: *const u8) {
        asm!("clflush [{0}]", in(reg) p, options(nostack, preserves_flags));
    }

    /// Orders earlier stores and clwb/clflushopt before later stores.
    #[inline(always)]
    pub(crate) fn sfence() {
        // SAFETY: sfence has no operands and is part of SSE, always present on x86-64.
        unsafe { asm!("sfence", options(nostack, preserves_flags)) };
    }

    /// Orders every earlier load and store (and flush) before every later one.
    #[inline(always)]
    pub(crate) fn mfence() {
        // SAFETY: mfence has no operands and is part of SSE2, always present on x86-64.
        unsafe { asm!("mfence", options(nostack, preserves_flags)) };
    }

    /// One machine store of the `N` low bytes of `v` (N = 1, 2, 4 or 8) at `p`,
    /// at any alignment: a single `mov` that the compiler can neither merge
    /// with its neighbours nor split, so a DBI tracer sees exactly the stores
    /// pmsim's tracer records.
    ///
    /// # Safety
    /// `p` is valid for an `N`-byte write.
    #[inline(always)]
    pub(crate) unsafe fn store<const N: usize>(p: *mut u8, v: u64) {
        match N {
            1 => asm!("mov byte ptr [{0}], {1:l}", in(reg) p, in(reg) v, options(nostack, preserves_flags)),
            2 => asm!("mov word ptr [{0}], {1:x}", in(reg) p, in(reg) v, options(nostack, preserves_flags)),
            4 => asm!("mov dword ptr [{0}], {1:e}", in(reg) p, in(reg) v, options(nostack, preserves_flags)),
            8 => asm!("mov qword ptr [{0}], {1}", in(reg) p, in(reg) v, options(nostack, preserves_flags)),
            _ => unreachable!("a machine store is 1, 2, 4 or 8 bytes"),
        }
    }

    /// A Valgrind client request (valgrind.h's `VALGRIND_DO_CLIENT_REQUEST`
    /// on amd64): `args` is the request code and its five arguments.
    /// Outside Valgrind it is a handful of no-op instructions (four
    /// rotations of rdi that add up to a whole turn, and `xchg rbx, rbx`)
    /// and returns `default`.
    #[inline(always)]
    pub(crate) fn valgrind_request(default: u64, args: &[u64; 6]) -> u64 {
        let mut r = default;
        // SAFETY: the sequence leaves every register as it was (rdi turns
        // by 128 bits); Valgrind, when present, reads `args` (valid for the
        // call) and writes its answer to rdx.
        unsafe {
            asm!(
                "rol rdi, 3",
                "rol rdi, 13",
                "rol rdi, 61",
                "rol rdi, 51",
                "xchg rbx, rbx",
                inout("rdx") r,
                in("rax") args.as_ptr(),
                inout("rdi") 0u64 => _,
                options(nostack),
            );
        }
        r
    }

    /// A non-temporal 8-byte store: bypasses the cache, durable after the next sfence.
    ///
    /// # Safety
    /// `p` is valid for an 8-byte write and 8-byte aligned.
    #[inline(always)]
    pub(crate) unsafe fn movnti(p: *mut u64, v: u64) {
        asm!("movnti [{0}], {1}", in(reg) p, in(reg) v, options(nostack, preserves_flags));
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::*;

#[cfg(not(target_arch = "x86_64"))]
mod other {
    // The flush instructions are never selected here: `FlushInsn::check`
    // refuses them because `probe` reports none.
    pub(crate) unsafe fn clwb(_: *const u8) {
        unreachable!("clwb on a non-x86 CPU")
    }
    pub(crate) unsafe fn clflushopt(_: *const u8) {
        unreachable!("clflushopt on a non-x86 CPU")
    }
    pub(crate) unsafe fn clflush(_: *const u8) {
        unreachable!("clflush on a non-x86 CPU")
    }
    pub(crate) fn sfence() {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
    pub(crate) fn mfence() {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
    pub(crate) unsafe fn movnti(p: *mut u64, v: u64) {
        p.write_volatile(v);
    }
    pub(crate) fn valgrind_request(default: u64, _args: &[u64; 6]) -> u64 {
        default
    }
    pub(crate) unsafe fn store<const N: usize>(p: *mut u8, v: u64) {
        let b = v.to_le_bytes();
        for (i, byte) in b[..N].iter().enumerate() {
            p.add(i).write_volatile(*byte);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) use other::*;

/// The time-stamp counter (or a monotonic clock's nanoseconds off x86-64).
#[inline(always)]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions and no side effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static T0: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        T0.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
    }
}
