//! Which of pmsim's allocators stands for which allocator of the NVAlloc
//! paper, and how the paper groups them: the figures split small-object
//! throughput into strongly consistent allocators (PMDK and the WAL-based
//! ones, Fig. 9) and weakly consistent ones (GC-based, Fig. 10), and the
//! claims name peers the paper compares against. A peer registered under any
//! of its names joins the figures and claims without more; one that is not
//! registered makes the claims about it "not measured".

use crate::row::Row;

/// How the paper groups an allocator (§6.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// PMDK and the WAL-based allocators (nvm_malloc, PAllocator,
    /// NVAlloc-LOG and its ablations): Fig. 9, 20, 21.
    Strong,
    /// The GC-based allocators (Makalu, Ralloc, NVAlloc-GC): Fig. 10.
    Weak,
    /// pmsim's other allocators (LLFree, Metall): not in the paper.
    Other,
}

/// An allocator the paper compares NVAlloc with.
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    /// As the paper writes it.
    pub paper: &'static str,
    /// pmsim allocator labels that stand for it, preferred first (Makalu:
    /// the paper measured the shipped code, `makalu:shipped=true`).
    pub labels: &'static [&'static str],
    pub class: Class,
}

/// The paper's peers (§6.1).
pub const PEERS: &[Peer] = &[
    Peer { paper: "PMDK", labels: &["pmdk"], class: Class::Strong },
    Peer { paper: "nvm_malloc", labels: &["nvm-malloc", "nvm_malloc", "nvmmalloc"], class: Class::Strong },
    Peer { paper: "PAllocator", labels: &["pallocator"], class: Class::Strong },
    Peer { paper: "Makalu", labels: &["makalu:shipped=true", "makalu"], class: Class::Weak },
    Peer { paper: "Ralloc", labels: &["ralloc"], class: Class::Weak },
];

/// The peer the paper calls `paper`.
pub fn peer(paper: &str) -> &'static Peer {
    PEERS.iter().find(|p| p.paper == paper).unwrap_or_else(|| panic!("no peer {paper}"))
}

/// The class of allocator `label` (a spec as written).
pub fn class(label: &str) -> Class {
    let name = label.split(':').next().unwrap_or("");
    match name {
        "nvalloc-log" | "base" | "+interleaved" | "+log" => Class::Strong,
        "nvalloc-gc" => Class::Weak,
        _ => PEERS
            .iter()
            .find(|p| p.labels.iter().any(|l| l.split(':').next() == Some(name)))
            .map_or(Class::Other, |p| p.class),
    }
}

/// The label of `peer` that `rows` hold (the preferred one first), if any.
pub fn label_in(peer: &Peer, rows: &[Row]) -> Option<&'static str> {
    peer.labels.iter().copied().find(|l| rows.iter().any(|r| r.point.alloc == *l && r.point.alloc_params.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_the_paper() {
        assert_eq!(class("nvalloc-log:wal=strict"), Class::Strong);
        assert_eq!(class("pmdk"), Class::Strong);
        assert_eq!(class("makalu:shipped=true"), Class::Weak);
        assert_eq!(class("nvm_malloc"), Class::Strong);
        assert_eq!(class("metall"), Class::Other);
        assert_eq!(peer("Makalu").labels[0], "makalu:shipped=true");
    }
}
