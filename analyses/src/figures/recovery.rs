//! Fig. 18: how long each allocator's own recovery takes on the heap a
//! crash leaves after a linked list was built (the `list` workload's native
//! runs, whose rows carry the timed recovery).

use super::alloc_label;
use crate::fields::*;
use crate::peers::{self, Class};
use crate::plot::{Figure, Kind, Panel};
use crate::row::Row;
use crate::table::{num, Table};

/// Fig. 18: recovery time per allocator, strongly consistent ones first.
pub fn fig18(rows: &[Row]) -> Option<Figure> {
    let mut rs: Vec<&Row> = rows.iter().filter(|r| r.num(RECOVERY_S).is_some()).collect();
    if rs.is_empty() {
        return None;
    }
    rs.sort_by_key(|r| peers::class(&r.point.alloc) != Class::Strong);
    let mut table = Table::new(&[
        "allocator",
        "consistency",
        "list nodes",
        "recovery (ms)",
        "after the open returned (ms)",
        "ns per node",
        "nodes intact after recovery",
    ]);
    let mut series = Vec::new();
    for r in &rs {
        let s = r.num(RECOVERY_S).expect("filtered");
        let nodes = r.num(LIST_NODES);
        let class = match peers::class(&r.point.alloc) {
            Class::Strong => "strong",
            Class::Weak => "weak",
            Class::Other => "-",
        };
        table.push(vec![
            alloc_label(r, &[]),
            class.into(),
            num(nodes),
            format!("{:.3}", 1e3 * s),
            format!("{:.3}", 1e3 * r.num(RECOVERY_DEFERRED_S).unwrap_or(0.0)),
            num(nodes.filter(|&n| n > 0.0).map(|n| 1e9 * s / n)),
            num(r.num(RECOVERED_NODES)),
        ]);
        series.push((alloc_label(r, &[]), vec![1e3 * s]));
    }
    let nodes = rs.iter().filter_map(|r| r.num(LIST_NODES)).fold(0.0, f64::max);
    Some(Figure {
        id: "fig18".into(),
        title: "Recovery time (NVAlloc Fig. 18)".into(),
        caption: format!(
            "Wall time of each allocator's own recovery code, natively on one thread, on the heap a crash leaves \
             right after one thread built a singly linked list of {nodes:.0} nodes of 64–128 B (the paper: 10 M), \
             each node published with malloc_to into the previous node's next slot; the least of three recoveries, \
             each of a fresh copy of the crashed heap. nvm_malloc's open replays its activation log and returns, \
             while a thread it starts walks the chunks: that walk is timed apart (the table's 'after the open \
             returned') and left out, and nvm-malloc:background_walk=false counts it. After each recovery every \
             node was found allocated and intact. Strongly consistent allocators first, then the weakly consistent (GC-based) ones."
        ),
        panels: vec![Panel {
            title: format!("list of {nodes:.0} nodes, one thread"),
            x_label: "allocator".into(),
            y_label: "recovery time (ms)".into(),
            kind: Kind::LogBars { categories: vec!["recovery".into()], series },
        }],
        table,
        paper: None,
    })
}
