//! The flush instructions pmsim can issue, which of them this CPU has, and
//! the error of asking for one it lacks. Apart from [`crate::pm`] so that
//! the heap (which flushes its header) and the persistence handles both use
//! it without depending on each other.

use crate::arch;
use pmsim_traces::FlushKind;
use std::fmt;
use std::io;
use std::str::FromStr;
use std::sync::OnceLock;

/// The instruction a flush compiles to.
///
/// Parsed from `clwb`, `clflushopt`, `clflush` or `none` (command-line and
/// config spelling, and the trace header's `flush_insn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlushInsn {
    /// Write back, keep the line cached; weakly ordered (needs a fence).
    Clwb,
    /// Write back and invalidate; weakly ordered (needs a fence).
    Clflushopt,
    /// Write back and invalidate; ordered with stores and other clflushes.
    Clflush,
    /// eADR: the caches are in the persistence domain, so flushes are skipped
    /// (and not traced); fences are still issued.
    None,
}

impl FlushInsn {
    pub const ALL: [FlushInsn; 4] = [FlushInsn::Clwb, FlushInsn::Clflushopt, FlushInsn::Clflush, FlushInsn::None];

    pub fn name(self) -> &'static str {
        match self {
            FlushInsn::Clwb => "clwb",
            FlushInsn::Clflushopt => "clflushopt",
            FlushInsn::Clflush => "clflush",
            FlushInsn::None => "none",
        }
    }

    /// The trace's flush kind; `None` for eADR, which issues no flushes.
    pub fn kind(self) -> Option<FlushKind> {
        match self {
            FlushInsn::Clwb => Some(FlushKind::Clwb),
            FlushInsn::Clflushopt => Some(FlushKind::Clflushopt),
            FlushInsn::Clflush => Some(FlushKind::Clflush),
            FlushInsn::None => None,
        }
    }

    /// The cheapest flush this CPU has: clwb, else clflushopt, else clflush
    /// (else none, on a CPU without any).
    pub fn best() -> FlushInsn {
        CpuFeatures::detect().best()
    }

    /// Whether this CPU can execute the instruction (`None` always can).
    pub fn is_supported(self) -> bool {
        CpuFeatures::detect().supports(self)
    }

    /// Refuses an instruction that `cpu` lacks, naming what it has instead.
    pub fn check(self, cpu: &CpuFeatures) -> Result<(), PmError> {
        if cpu.supports(self) {
            Ok(())
        } else {
            Err(PmError::Unsupported { insn: self, cpu: *cpu })
        }
    }

    /// Flushes the line holding `p` with this instruction.
    ///
    /// # Safety
    /// The CPU supports `self`, and `p` lies in mapped memory.
    #[inline(always)]
    pub(crate) unsafe fn flush_line(self, p: *const u8) {
        match self {
            FlushInsn::Clwb => arch::clwb(p),
            FlushInsn::Clflushopt => arch::clflushopt(p),
            FlushInsn::Clflush => arch::clflush(p),
            FlushInsn::None => {}
        }
    }
}

impl fmt::Display for FlushInsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FlushInsn {
    type Err = PmError;

    fn from_str(s: &str) -> Result<Self, PmError> {
        FlushInsn::ALL.into_iter().find(|i| i.name() == s).ok_or_else(|| PmError::UnknownFlushInsn(s.to_string()))
    }
}

/// The flush instructions a CPU implements, as CPUID reports them.
///
/// A value rather than a global so that the refusal of a missing instruction
/// can be tested on a CPU that has them all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuFeatures {
    pub clwb: bool,
    pub clflushopt: bool,
    pub clflush: bool,
}

impl CpuFeatures {
    /// This CPU's features (probed once: CPUID can cost microseconds in a VM).
    pub fn detect() -> CpuFeatures {
        static CPU: OnceLock<CpuFeatures> = OnceLock::new();
        *CPU.get_or_init(|| {
            let b = arch::probe();
            CpuFeatures { clwb: b.clwb, clflushopt: b.clflushopt, clflush: b.clflush }
        })
    }

    pub fn supports(&self, insn: FlushInsn) -> bool {
        match insn {
            FlushInsn::Clwb => self.clwb,
            FlushInsn::Clflushopt => self.clflushopt,
            FlushInsn::Clflush => self.clflush,
            FlushInsn::None => true,
        }
    }

    pub fn best(&self) -> FlushInsn {
        FlushInsn::ALL.into_iter().find(|&i| self.supports(i)).unwrap_or(FlushInsn::None)
    }

    /// The supported flush instructions, best first (always ends with `none`).
    pub fn available(&self) -> Vec<FlushInsn> {
        FlushInsn::ALL.into_iter().filter(|&i| self.supports(i)).collect()
    }
}

/// Why a [`Pm`] could not be made.
#[derive(Debug)]
pub enum PmError {
    /// A flush instruction name that is not one of ours.
    UnknownFlushInsn(String),
    /// The CPU lacks the requested flush instruction.
    Unsupported { insn: FlushInsn, cpu: CpuFeatures },
    /// The trace sink could not be made, or the collector thread not started.
    Trace(io::Error),
}

impl fmt::Display for PmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PmError::UnknownFlushInsn(s) => {
                write!(f, "unknown flush instruction '{s}' (expected clwb, clflushopt, clflush or none)")
            }
            PmError::Unsupported { insn, cpu } => {
                let has: Vec<&str> = cpu.available().iter().map(|i| i.name()).collect();
                write!(f, "this CPU has no {insn} instruction (available: {})", has.join(", "))
            }
            PmError::Trace(e) => write!(f, "cannot start tracing: {e}"),
        }
    }
}

impl std::error::Error for PmError {}
