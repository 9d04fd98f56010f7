//! DRAMsim3's trace (`TraceBasedCPU`): one request per line,
//! `0x<hex address> READ|WRITE <cycle>`, the cycle in memory clock cycles;
//! the request size is the memory's burst, so a packet's size is dropped.

use super::{Packet, PacketWriter};
use std::io::{self, Write};

/// tCK of DDR4-2400 (1200 MHz), the clock of DRAMsim3's DDR4 2400 configs, in ps.
pub const DEFAULT_TCK_PS: u64 = 833;

pub struct Writer<W: Write> {
    out: W,
    tck_ps: u64,
}

impl<W: Write> Writer<W> {
    /// `tck_ps` turns ticks (ps) into memory cycles (rounded down); at least 1.
    pub fn new(out: W, tck_ps: u64) -> Self {
        Writer { out, tck_ps: tck_ps.max(1) }
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write> PacketWriter for Writer<W> {
    #[inline]
    fn packet(&mut self, p: &Packet) -> io::Result<()> {
        let op = if p.write { "WRITE" } else { "READ" };
        writeln!(self.out, "{:#x} {op} {}", p.addr, p.tick / self.tck_ps)
    }

    fn finish(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}
