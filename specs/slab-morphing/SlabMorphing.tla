---------------------------- MODULE SlabMorphing ----------------------------
(***************************************************************************)
(* NVAlloc slab morphing (NVAlloc §5.2, §4.4) as pmsim implements it:      *)
(* model/src/nvalloc/arena.rs (Arena::morph, Arena::free_old),             *)
(* model/src/nvalloc/slab.rs (header states, undo_morph, finish_morph,     *)
(* Morph::build) and model/src/nvalloc/recovery.rs (recover).              *)
(*                                                                         *)
(* One slab of Units data units changes from class "A" (blocks of OldSize  *)
(* units: slab_before) to class "B" (blocks of NewSize units). While old   *)
(* blocks are live it is a slab_in: the persistent index table (TableUnits *)
(* units at the slab's tail) lists them, and the volatile cnt_slab /       *)
(* cnt_block hold back every new block that overlaps a live old block or   *)
(* the table. Freeing the last old block makes it a slab_after.            *)
(*                                                                         *)
(* Three cache lines carry the persistent state: the header ("hdr":        *)
(* size_class, old_size_class, the morph step flag, index_len), the bitmap *)
(* ("bm") and the index table ("tbl"). Each class's blocks start at its    *)
(* own data offset (OldOffset, NewOffset: SlabGeom::regular) and fill the  *)
(* slab to its end; the small models use unit-sized slabs with both        *)
(* offsets 0, trace validation the code's bytes (a unit is a byte, Units   *)
(* is the 64 KiB slab). User operations run one at a time: a morph holds   *)
(* the arena lock and morph_guard exclusively, so no malloc or free is in  *)
(* flight while it runs (Arena::morph). Crashes hit between any two        *)
(* persistence steps, including during recovery.                           *)
(*                                                                         *)
(* Variant "ok" is the code; "flag_before_table" drops the flush of the    *)
(* index table in step 2, so the step flag 2 can be durable before the     *)
(* table it vouches for.                                                   *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets, TLC

CONSTANTS OldSize,     \* units per block of the old class "A"
          NewSize,     \* units per block of the new class "B"
          OldOffset,   \* unit where class A's blocks start (its data_offset)
          NewOffset,   \* unit where class B's blocks start (its data_offset)
          Units,       \* units of the slab (its blocks end there)
          TableUnits,  \* units at the slab's tail the index table takes
          MaxLive,     \* most live blocks a morph candidate may have (the SU threshold)
          Variant      \* "ok" or a broken variant

ASSUME Variant \in {"ok", "flag_before_table"}
ASSUME TableUnits \in 0..Units /\ OldSize \in 1..Units /\ NewSize \in 1..Units
ASSUME OldOffset \in 0..(Units - OldSize) /\ NewOffset \in 0..(Units - NewSize)

VARIABLES vol, pend, fl, dur,   \* the persistency model (PersistencyModel)
          vtaken,               \* vslab: blocks of the current class taken (allocated or held back)
          cntSlab,              \* cnt_slab: live old blocks of the slab_in
          cntBlock,             \* cnt_block: per new block, occupants holding it back
          op,                   \* the user operation in flight (kept through a crash as a ghost)
          morphPc,              \* where Arena::morph is
          recPc,                \* where recovery is
          mode,                 \* "run", "recover" or "recovered"
          owned,                \* ghost: blocks the user holds (acknowledged, not being freed)
          phase,                \* ghost: "before", "morphing", "in", "after"
          preLive,              \* ghost: the old blocks live when the morph began
          crashPhase,           \* ghost: where the morph was at the (first) crash
          crashImg              \* ghost: the PM image the (first) crash left

Lines == {"hdr", "bm", "tbl"}
EADR == FALSE
PM == INSTANCE PersistencyModel

vars == <<vol, pend, fl, dur, vtaken, cntSlab, cntBlock, op, morphPc, recPc, mode,
          owned, phase, preLive, crashPhase, crashImg>>
ghosts == <<owned, phase, preLive, crashPhase, crashImg>>

\* Blocks of a class: as many as fit from its data offset to the slab's end
\* (SlabGeom::regular's nblocks).
OldBlk == 0..((Units - OldOffset) \div OldSize - 1)
NewBlk == 0..((Units - NewOffset) \div NewSize - 1)
Blocks(c) == IF c = "A" THEN OldBlk ELSE NewBlk
Size(c) == IF c = "A" THEN OldSize ELSE NewSize
\* Block b of class c spans the units [Start, End) (SlabGeom::block_off).
Start(c, b) == (IF c = "A" THEN OldOffset ELSE NewOffset) + b * Size(c)
End(c, b) == Start(c, b) + Size(c)
TableStart == Units - TableUnits
\* Intervals, not sets of units: the code's slabs have 65536 of them.
Overlap(ob, nb) == Start("A", ob) < End("B", nb) /\ Start("B", nb) < End("A", ob)
\* Every block of the other class that block ob (nb) may overlap has a
\* number in this short run (a superset: Overlap picks from it), so what
\* looks for overlaps stays linear in the blocks, not quadratic: trace
\* validation checks it on slabs of thousands of blocks at every step.
NearB(ob) == ((Start("A", ob) - NewOffset) \div NewSize - 1)..((End("A", ob) - NewOffset) \div NewSize + 1)
NearA(nb) == ((Start("B", nb) - OldOffset) \div OldSize - 1)..((End("B", nb) - OldOffset) \div OldSize + 1)
OnTable(nb) == End("B", nb) > TableStart
OnTableBlk == {nb \in NewBlk : OnTable(nb)}

NoOp == [k |-> "none"]
RegularA == [cls |-> "A", ocls |-> "A", flag |-> 0, ilen |-> 0]

\* The old blocks whose index-table entries (the first ilen) are live; an
\* entry past what reached PM reads as garbage, here as a free entry.
LiveEntries(h, t) == { t[i].ob : i \in { i \in 1..h.ilen : i <= Len(t) /\ t[i].live } }

\* The blocks the persistent state says are allocated, of a slab in a
\* regular or slab_in state (what recovery rebuilds the vslab from).
Allocated(img) ==
    { <<img.hdr.cls, b>> : b \in img.bm }
    \cup (IF img.hdr.ilen > 0 THEN { <<img.hdr.ocls, ob>> : ob \in LiveEntries(img.hdr, img.tbl) } ELSE {})

\* cnt_block as Morph::build computes it from the live old blocks.
\* (Built from constant functions, one EXCEPT per overlapping pair of a live
\* old block and a new block: a slab_in of a thousand new blocks is checked
\* at every step of a trace.)
NoPins == [nb \in NewBlk |-> 0]
TablePins == [nb \in NewBlk |-> IF OnTable(nb) THEN 1 ELSE 0]
RECURSIVE AddPins(_, _)
AddPins(f, P) ==
    IF P = {} THEN f
    ELSE LET p == CHOOSE p \in P : TRUE IN AddPins([f EXCEPT ![p[2]] = @ + 1], P \ {p})
Pins(live) ==
    AddPins(IF live # {} THEN TablePins ELSE NoPins,
            {p \in UNION {{<<ob, nb>> : nb \in NearB(ob)} : ob \in live} : p[2] \in NewBlk /\ Overlap(p[1], p[2])})
Pinned(live) == LET pins == Pins(live) IN {nb \in NewBlk : pins[nb] > 0}

\* The orders in which the index table may list the blocks of S: any (the
\* code lists them in the bitmap's bit order, which the stripes deal).
Orders(S) == {f \in [1..Cardinality(S) -> S] : \A i, j \in DOMAIN f : i # j => f[i] # f[j]}
\* The live old blocks of a table in its order (what undo_morph walks).
TableLive(h, t) ==
    LET s == SelectSeq(SubSeq(t, 1, IF h.ilen < Len(t) THEN h.ilen ELSE Len(t)), LAMBDA x : x.live)
    IN [i \in 1..Len(s) |-> s[i].ob]
\* The successive values of a line receiving the stores of seq one by one.
Prefixes(seq) == [i \in 1..Len(seq) |-> SubSeq(seq, 1, i)]

(***************************************************************************)
(* Recovery, as a function of the PM image (slab::undo_morph, then the     *)
(* slab_in with no live old block made regular by slab::finish_morph).     *)
(* The stepwise recovery below writes exactly these values.                *)
(***************************************************************************)
UndoneHdr(h) == [h EXCEPT !.cls = h.ocls]
ClearedHdr(h) == [h EXCEPT !.flag = 0, !.ilen = 0]
FinishedHdr(h) == [h EXCEPT !.ocls = h.cls, !.ilen = 0]
NeedsFinish(img) == img.hdr.flag = 0 /\ img.hdr.ilen > 0 /\ LiveEntries(img.hdr, img.tbl) = {}

RecoverImage(img) ==
    LET h == img.hdr
        u == CASE h.flag = 2 -> [img EXCEPT !.bm = LiveEntries(h, img.tbl), !.hdr = ClearedHdr(UndoneHdr(h))]
               [] h.flag = 1 -> [img EXCEPT !.hdr = ClearedHdr(UndoneHdr(h))]
               [] OTHER -> img
    IN IF NeedsFinish(u) THEN [u EXCEPT !.hdr = FinishedHdr(u.hdr)] ELSE u

InitImg == [hdr |-> RegularA, bm |-> {}, tbl |-> <<>>]

Init ==
    /\ PM!PMInit(InitImg)
    /\ vtaken = {}
    /\ cntSlab = 0
    /\ cntBlock = [nb \in NewBlk |-> 0]
    /\ op = NoOp
    /\ morphPc = "idle"
    /\ recPc = "none"
    /\ mode = "run"
    /\ owned = {}
    /\ phase = "before"
    /\ preLive = {}
    /\ crashPhase = "none"
    /\ crashImg = InitImg

Idle == mode = "run" /\ op = NoOp /\ morphPc = "idle"

(***************************************************************************)
(* User operations. One that stores a single line and persists it is one   *)
(* step (PM!StorePersist): it starts from a quiescent PM (every earlier    *)
(* step ended with a fence), so the states before and after it already    *)
(* give every crash image (the line's old or new value). An operation cut  *)
(* by a crash is resolved by the WAL under NVAlloc-LOG; Resume below       *)
(* models that by giving the block to the user iff it is allocated.       *)
(*                                                                         *)
(* malloc of a block of the slab's current class (NvAllocThread::malloc_small): *)
(* its bit set and persisted, then the block is the user's.                *)
(***************************************************************************)
Malloc(b) ==
    /\ Idle
    /\ vol.hdr.flag = 0
    /\ b \in Blocks(vol.hdr.cls) \ vtaken
    /\ PM!StorePersist("bm", vol.bm \cup {b})
    /\ vtaken' = vtaken \cup {b}
    /\ owned' = owned \cup {<<vol.hdr.cls, b>>}
    /\ UNCHANGED <<cntSlab, cntBlock, op, morphPc, recPc, mode, phase, preLive, crashPhase, crashImg>>

\* free of a block of the current class: its bit cleared and persisted
\* (NvAllocThread::free_small).
Free(b) ==
    /\ Idle
    /\ <<vol.hdr.cls, b>> \in owned
    /\ PM!StorePersist("bm", vol.bm \ {b})
    /\ vtaken' = vtaken \ {b}
    /\ owned' = owned \ {<<vol.hdr.cls, b>>}
    /\ UNCHANGED <<cntSlab, cntBlock, op, morphPc, recPc, mode, phase, preLive, crashPhase, crashImg>>

(***************************************************************************)
(* free of a live old block of a slab_in (Arena::free_old): its index-     *)
(* table entry is cleared and persisted, then cnt_slab / cnt_block drop    *)
(* and the new blocks no longer held back are released. The last old      *)
(* block makes the slab regular again (slab::finish_morph, one durable     *)
(* header write) before the blocks under the table are released.          *)
(***************************************************************************)
FreeOld(ob) ==
    /\ Idle
    /\ vol.hdr.flag = 0 /\ vol.hdr.ilen > 0
    /\ <<vol.hdr.ocls, ob>> \in owned
    /\ \E i \in 1..Len(vol.tbl) :
          /\ vol.tbl[i].ob = ob
          /\ PM!StorePersist("tbl", [vol.tbl EXCEPT ![i] = [ob |-> ob, live |-> FALSE]])
    /\ owned' = owned \ {<<vol.hdr.ocls, ob>>}
    /\ LET last == cntSlab = 1
           cb == [nb \in NewBlk |-> cntBlock[nb] - (IF Overlap(ob, nb) THEN 1 ELSE 0)
                                               - (IF last /\ OnTable(nb) THEN 1 ELSE 0)]
           freed == {nb \in NewBlk : cntBlock[nb] > 0 /\ cb[nb] = 0}
       IN /\ cntSlab' = cntSlab - 1
          /\ cntBlock' = cb
          /\ IF last
             THEN /\ op' = [k |-> "finish_morph", c |-> vol.hdr.ocls, b |-> ob, rel |-> freed]
                  /\ UNCHANGED vtaken
             ELSE /\ vtaken' = vtaken \ freed
                  /\ UNCHANGED op
    /\ UNCHANGED <<morphPc, recPc, mode, phase, preLive, crashPhase, crashImg>>

FinishMorph ==
    /\ mode = "run" /\ op.k = "finish_morph"
    /\ PM!StorePersist("hdr", FinishedHdr(vol.hdr))
    /\ vtaken' = vtaken \ op.rel
    /\ op' = NoOp
    /\ phase' = "after"
    /\ UNCHANGED <<cntSlab, cntBlock, morphPc, recPc, mode, owned, preLive, crashPhase, crashImg>>

(***************************************************************************)
(* Arena::morph. A candidate is a regular slab of the old class with at    *)
(* most MaxLive live blocks, none cached in a tcache (no operation in      *)
(* flight) and none under the index table. Step 1 persists the old         *)
(* geometry and flag 1 (for a regular slab old_* already equal the current *)
(* fields, so the first write_header stores what is there: left out);      *)
(* step 2 the index table and index_len, then flag 2; step 3 the new class *)
(* and an empty bitmap; then flag 0. Each write_header is a store, flush   *)
(* and fence.                                                              *)
(***************************************************************************)
MorphStep1 ==
    /\ Idle /\ phase = "before"
    /\ vol.hdr = RegularA
    /\ Cardinality(vol.bm) <= MaxLive
    /\ \A ob \in vol.bm : Start("A", ob) >= NewOffset /\ End("A", ob) <= TableStart
    /\ PM!WriteFlush("hdr" :> [vol.hdr EXCEPT !.flag = 1])
    /\ preLive' = vol.bm
    /\ phase' = "morphing"
    /\ morphPc' = "step1_fence"
    /\ UNCHANGED <<vtaken, cntSlab, cntBlock, op, recPc, mode, owned, crashPhase, crashImg>>

MorphFence(from, to) ==
    /\ mode = "run" /\ morphPc = from
    /\ PM!Fence
    /\ morphPc' = to
    /\ UNCHANGED <<vtaken, cntSlab, cntBlock, op, recPc, mode, ghosts>>

\* The table entries (one store each, listing the live blocks in `order`),
\* flushed; index_len in the header; one persist.
MorphStep2TableIn(order) ==
    /\ mode = "run" /\ morphPc = "step2"
    /\ order \in Orders(preLive)
    /\ LET entries == [i \in 1..Cardinality(preLive) |-> [ob |-> order[i], live |-> TRUE]]
           tblStores == IF preLive = {} THEN <<>> ELSE Prefixes(entries)
           flushed == IF Variant = "flag_before_table" THEN {"hdr"} ELSE {"tbl", "hdr"}
       IN PM!WriteSeqs(("hdr" :> <<[vol.hdr EXCEPT !.ilen = Cardinality(preLive)]>>)
                       @@ (IF preLive = {} THEN <<>> ELSE ("tbl" :> tblStores)), flushed)
    /\ morphPc' = "step2_fence"
    /\ UNCHANGED <<vtaken, cntSlab, cntBlock, op, recPc, mode, ghosts>>

MorphStep2Table == \E order \in Orders(preLive) : MorphStep2TableIn(order)

MorphStep2Flag ==
    /\ mode = "run" /\ morphPc = "step2_flag"
    /\ PM!WriteFlush("hdr" :> [vol.hdr EXCEPT !.flag = 2])
    /\ morphPc' = "step2_flag_fence"
    /\ UNCHANGED <<vtaken, cntSlab, cntBlock, op, recPc, mode, ghosts>>

MorphStep3 ==
    /\ mode = "run" /\ morphPc = "step3"
    /\ PM!WriteFlush(("bm" :> {}) @@ ("hdr" :> [vol.hdr EXCEPT !.cls = "B"]))
    /\ morphPc' = "step3_fence"
    /\ UNCHANGED <<vtaken, cntSlab, cntBlock, op, recPc, mode, ghosts>>

MorphFlag0 ==
    /\ mode = "run" /\ morphPc = "flag0"
    /\ LET h == [vol.hdr EXCEPT !.flag = 0]
       IN PM!WriteFlush("hdr" :> (IF preLive = {} THEN FinishedHdr(h) ELSE h))
    /\ morphPc' = "flag0_fence"
    /\ UNCHANGED <<vtaken, cntSlab, cntBlock, op, recPc, mode, ghosts>>

\* The morph is complete: the vslab of the new class, with Morph::build's counters.
MorphDone ==
    /\ mode = "run" /\ morphPc = "flag0_fence"
    /\ PM!Fence
    /\ vtaken' = Pinned(preLive)
    /\ cntSlab' = Cardinality(preLive)
    /\ cntBlock' = Pins(preLive)
    /\ morphPc' = "idle"
    /\ phase' = IF preLive = {} THEN "after" ELSE "in"
    /\ preLive' = {}
    /\ UNCHANGED <<op, recPc, mode, owned, crashPhase, crashImg>>

(***************************************************************************)
(* Crash: PM keeps a prefix of each line's queued stores, all volatile     *)
(* state is gone; recovery starts. The ghosts remember what the user was   *)
(* told and, for the first crash of a recovery, where the morph was and    *)
(* the image it left.                                                      *)
(***************************************************************************)
MorphPoint ==
    CASE phase = "morphing" /\ morphPc = "flag0_fence" -> "commit"
      [] phase = "morphing" -> "mid"
      [] phase \in {"in", "after"} -> "done"
      [] OTHER -> "before"

Crash ==
    /\ mode \in {"run", "recover"}
    /\ \E img \in PM!CrashImages :
          /\ PM!CrashTo(img)
          /\ crashImg' = IF mode = "recover" THEN crashImg ELSE img
    /\ crashPhase' = IF mode = "recover" THEN crashPhase ELSE MorphPoint
    /\ mode' = "recover"
    /\ recPc' = "start"
    /\ morphPc' = "idle"
    /\ vtaken' = {}
    /\ cntSlab' = 0
    /\ cntBlock' = [nb \in NewBlk |-> 0]
    /\ UNCHANGED <<op, owned, phase, preLive>>

(***************************************************************************)
(* Recovery (recovery.rs recover): a slab found at flag 1 or 2 is undone   *)
(* (slab::undo_morph: at flag 2 the bitmap rebuilt from the live table     *)
(* entries, one bit store at a time, flushed, with the old class in the    *)
(* header, persisted; then flag and index_len cleared, persisted); a       *)
(* slab_in without live old blocks becomes regular (slab::finish_morph);   *)
(* then the vslab is built (Morph::build for a slab_in).                   *)
(***************************************************************************)
Rebuild ==
    LET h == vol.hdr
        live == IF h.ilen > 0 THEN LiveEntries(h, vol.tbl) ELSE {}
    IN /\ vtaken' = vol.bm \cup (IF live # {} THEN Pinned(live) ELSE {})
       /\ cntSlab' = Cardinality(live)
       /\ cntBlock' = IF live # {} THEN Pins(live) ELSE [nb \in NewBlk |-> 0]
       /\ phase' = CASE h.ilen > 0 -> "in" [] h.cls = "A" -> "before" [] OTHER -> "after"
       /\ mode' = "recovered"
       /\ recPc' = "none"

RecoverStart ==
    /\ mode = "recover" /\ recPc = "start"
    /\ LET h == vol.hdr IN
       CASE h.flag = 2 ->
              LET live == TableLive(h, vol.tbl)
                  bits == <<{}>> \o [i \in 1..Len(live) |-> {live[j] : j \in 1..i}]
              IN /\ PM!WriteSeqs(("bm" :> bits) @@ ("hdr" :> <<UndoneHdr(h)>>), {"bm", "hdr"})
                 /\ recPc' = "undo_fence"
                 /\ UNCHANGED <<vtaken, cntSlab, cntBlock, phase, mode>>
         [] h.flag = 1 ->
              /\ PM!WriteFlush("hdr" :> UndoneHdr(h))
              /\ recPc' = "undo_fence"
              /\ UNCHANGED <<vtaken, cntSlab, cntBlock, phase, mode>>
         [] OTHER ->
              IF NeedsFinish(vol)
              THEN /\ PM!WriteFlush("hdr" :> FinishedHdr(h))
                   /\ recPc' = "finish_fence"
                   /\ UNCHANGED <<vtaken, cntSlab, cntBlock, phase, mode>>
              ELSE /\ Rebuild
                   /\ UNCHANGED <<vol, pend, fl, dur>>
    /\ UNCHANGED <<op, morphPc, owned, preLive, crashPhase, crashImg>>

RecoverUndoFence ==
    /\ mode = "recover" /\ recPc = "undo_fence"
    /\ PM!Fence
    /\ recPc' = "undo_clear"
    /\ UNCHANGED <<vtaken, cntSlab, cntBlock, op, morphPc, mode, ghosts>>

RecoverUndoClear ==
    /\ mode = "recover" /\ recPc = "undo_clear"
    /\ PM!WriteFlush("hdr" :> ClearedHdr(vol.hdr))
    /\ recPc' = "clear_fence"
    /\ UNCHANGED <<vtaken, cntSlab, cntBlock, op, morphPc, mode, ghosts>>

RecoverClearFence ==
    /\ mode = "recover" /\ recPc = "clear_fence"
    /\ PM!Fence
    /\ recPc' = "start"
    /\ UNCHANGED <<vtaken, cntSlab, cntBlock, op, morphPc, mode, ghosts>>

RecoverFinishFence ==
    /\ mode = "recover" /\ recPc = "finish_fence"
    /\ PM!Fence
    /\ recPc' = "start"
    /\ UNCHANGED <<vtaken, cntSlab, cntBlock, op, morphPc, mode, ghosts>>

\* Back to work. The operation in flight at the crash is resolved by the
\* WAL: the user holds its block iff the recovered state has it allocated.
Resume ==
    /\ mode = "recovered"
    /\ owned' = owned \cup (IF op # NoOp /\ <<op.c, op.b>> \in Allocated(vol) THEN {<<op.c, op.b>>} ELSE {})
    /\ op' = NoOp
    /\ mode' = "run"
    /\ crashPhase' = "none"
    /\ preLive' = {}
    /\ crashImg' = InitImg
    /\ UNCHANGED <<vol, pend, fl, dur, vtaken, cntSlab, cntBlock, morphPc, recPc, phase>>

Next ==
    \/ \E b \in OldBlk \cup NewBlk : Malloc(b) \/ Free(b) \/ FreeOld(b)
    \/ FinishMorph
    \/ MorphStep1 \/ MorphFence("step1_fence", "step2") \/ MorphStep2Table
    \/ MorphFence("step2_fence", "step2_flag") \/ MorphStep2Flag
    \/ MorphFence("step2_flag_fence", "step3") \/ MorphStep3
    \/ MorphFence("step3_fence", "flag0") \/ MorphFlag0 \/ MorphDone
    \/ Crash
    \/ RecoverStart \/ RecoverUndoFence \/ RecoverUndoClear \/ RecoverClearFence \/ RecoverFinishFence
    \/ Resume

Spec == Init /\ [][Next]_vars

(***************************************************************************)
(* Invariants                                                              *)
(***************************************************************************)
TypeOK ==
    /\ PM!PMTypeOK
    /\ mode \in {"run", "recover", "recovered"}
    /\ vtaken \subseteq (OldBlk \cup NewBlk)
    /\ cntSlab \in 0..Cardinality(OldBlk)

Held == owned

\* No new block overlapping a live old block, or the live index table, is
\* ever handed out.
\* (Each held block of the class with fewer held is looked at, with the
\* few blocks of the other class near it: linear in the smaller class. A
\* held new block is one of NewBlk: Malloc takes it from there.)
NoNewBlockOverLiveOld ==
    LET HA == Held \cap ({"A"} \X Nat)
        HB == Held \cap ({"B"} \X Nat)
    IN /\ IF Cardinality(HA) <= Cardinality(HB)
          THEN \A h \in HA : \A nb \in NearB(h[2]) : <<"B", nb>> \in HB => ~Overlap(h[2], nb)
          ELSE \A h \in HB : \A ob \in NearA(h[2]) : <<"A", ob>> \in HA => ~Overlap(ob, h[2])
       /\ (vol.hdr.ilen = 0 /\ dur.hdr.ilen = 0) \/ HB \cap ({"B"} \X OnTableBlk) = {}

Recovered == mode = "recovered"

\* Recovery never leaves an intermediate header: regular (old_* = current)
\* or a complete slab_in, nothing still queued.
RecoveredNoIntermediate ==
    Recovered =>
        /\ PM!Quiescent
        /\ dur.hdr.flag = 0
        /\ dur.hdr.ilen = 0 => dur.hdr.ocls = dur.hdr.cls
        /\ dur.hdr.ilen > 0 => (dur.hdr.ocls = "A" /\ dur.hdr.cls = "B")

\* A crash mid-morph recovers exactly the slab before the morph.
MidMorphRecoversPreMorph ==
    (Recovered /\ crashPhase = "mid") => (dur.hdr = RegularA /\ dur.bm = preLive)

\* A crash after a completed morph recovers the slab after it.
CompletedMorphRecoversPostMorph ==
    (Recovered /\ crashPhase = "done") => dur.hdr.cls = "B"

\* Every old block live before the morph and not freed stays allocated.
LiveOldBlocksStayAllocated ==
    Recovered => \A <<c, ob>> \in owned : c = "A" => <<c, ob>> \in Allocated(dur)

\* Recovered allocations: all acknowledged ones, plus at most the one in flight.
RecoveredAllocations ==
    Recovered =>
        /\ owned \subseteq Allocated(dur)
        /\ Allocated(dur) \subseteq owned \cup (IF op # NoOp THEN {<<op.c, op.b>>} ELSE {})

\* Recovery is idempotent: however many crashes interrupt it, it ends in the
\* state one uninterrupted recovery of the first crash's image produces.
RecoveryIdempotent ==
    Recovered => dur = RecoverImage(crashImg)

\* While running, cnt_slab and cnt_block agree with the persistent index table.
CountersMatchTable ==
    (mode = "run" /\ op = NoOp /\ morphPc = "idle" /\ vol.hdr.flag = 0) =>
        LET live == IF vol.hdr.ilen > 0 THEN LiveEntries(vol.hdr, vol.tbl) ELSE {}
        IN /\ cntSlab = Cardinality(live)
           /\ live # {} => cntBlock = Pins(live)
=============================================================================
