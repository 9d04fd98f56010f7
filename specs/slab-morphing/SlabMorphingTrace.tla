------------------------- MODULE SlabMorphingTrace -------------------------
(***************************************************************************)
(* Trace validation of SlabMorphing (`pmsim specs validate`): the life of  *)
(* a slab in a run of pmsim's NVAlloc around one morph, from its           *)
(* init_header (or the end of its previous morph's segment) to the end of  *)
(* the trace, the slab's return to the large allocator or its next morph,  *)
(* mapped by specs/src/validate/morphing.rs for every slab that morphs;    *)
(* its class before the morph is "A", after it "B", and the constants are  *)
(* the code's geometry in bytes.                                           *)
(*                                                                         *)
(* A trace is checked in windows, each from the state the trace gives the  *)
(* slab at the window's start: TraceData's StartImg (header, bitmap and    *)
(* table as the steps before it left them). The mapping starts a window    *)
(* only where the slab is quiet (every line written flushed, flag 0, no    *)
(* finish_morph due), where the spec's whole state follows from the image  *)
(* as recovery's Rebuild derives it: InitFrom below (Init is               *)
(* InitFrom(InitImg)).                                                     *)
(*                                                                         *)
(* The mapping cuts the slab's persistent writes at the fences of the      *)
(* thread writing them: each cut is a "Write" step (the new value of every *)
(* modelled line stored to, header, bitmap or index table, and which of    *)
(* them were flushed) and a "Fence" step. A Write step is any spec action  *)
(* that leaves exactly those values and flushes exactly those of the lines *)
(* it writes; a Fence step is the spec's fence after a WriteFlush step, or *)
(* nothing where nothing is left to make durable (after a StorePersist     *)
(* step). A write of the values a quiescent line already holds is no step  *)
(* of the spec (the first write_header of a morph, which stores the old    *)
(* geometry a regular slab already has).                                   *)
(***************************************************************************)
EXTENDS SlabMorphing, TraceValidation, TraceData

VARIABLE i

tvars == <<vars, i>>

\* What the spec's state takes next (for the report of a step that fails).
Expected ==
    CASE mode = "run" /\ op.k = "finish_morph" -> "FinishMorph"
      [] morphPc = "idle" /\ phase = "before" -> "Malloc, Free or MorphStep1"
      [] morphPc = "idle" /\ phase = "in" -> "Malloc, Free or FreeOld"
      [] morphPc = "idle" -> "Malloc or Free"
      [] morphPc = "step2" -> "MorphStep2Table"
      [] morphPc = "step2_flag" -> "MorphStep2Flag"
      [] morphPc = "step3" -> "MorphStep3"
      [] morphPc = "flag0" -> "MorphFlag0"
      [] morphPc = "flag0_fence" -> "MorphDone (the fence after flag 0)"
      [] OTHER -> "MorphFence (the fence after " \o morphPc \o ")"

NextExpected == IF i < Len(Trace) THEN Expected ELSE "nothing"

\* The value step e leaves in line l: the header and table as given, the
\* bitmap as the blocks it adds to and removes from the set (the trace
\* stays short: a slab has hundreds of blocks).
NewValue(e, l) == IF l = "bm" THEN (vol.bm \cup e.w[l].add) \ e.w[l].del ELSE e.w[l]

\* The written lines hold e's values afterwards, the others are untouched,
\* and a written line is flushed (covered up to its last store) iff the
\* trace flushed it.
Leaves(e) ==
    /\ \A l \in Lines : vol'[l] = IF l \in DOMAIN e.w THEN NewValue(e, l) ELSE vol[l]
    /\ \A l \in DOMAIN e.w : (fl'[l] = Len(pend'[l])) <=> (l \in e.f)

\* Blocks whose bit the step changes, and old blocks whose table entry it
\* changes: the only candidates of Malloc / Free / FreeOld.
BitsChanged(e) == IF "bm" \in DOMAIN e.w THEN e.w["bm"].add \cup e.w["bm"].del ELSE {}
EntriesChanged(e) ==
    IF "tbl" \in DOMAIN e.w
    THEN {e.w["tbl"][k].ob : k \in {k \in DOMAIN e.w["tbl"] : k \notin DOMAIN vol.tbl \/ vol.tbl[k] # e.w["tbl"][k]}}
    ELSE {}

TableOrder(e) == IF "tbl" \in DOMAIN e.w THEN [k \in DOMAIN e.w["tbl"] |-> e.w["tbl"][k].ob] ELSE <<>>

WriteStep(e) ==
    \/ /\ \E b \in BitsChanged(e) : Malloc(b) \/ Free(b)
       /\ Leaves(e)
    \/ /\ \E b \in EntriesChanged(e) : FreeOld(b)
       /\ Leaves(e)
    \/ /\ FinishMorph \/ MorphStep1 \/ MorphStep2Flag \/ MorphStep3 \/ MorphFlag0
       /\ Leaves(e)
    \* The table lists the blocks in the trace's order (enumerating every
    \* order of tens of live blocks is out of the question).
    \/ /\ MorphStep2TableIn(TableOrder(e))
       /\ Leaves(e)
    \/ /\ PM!Quiescent
       /\ \A l \in DOMAIN e.w : NewValue(e, l) = vol[l]
       /\ UNCHANGED vars

FenceStep ==
    \/ MorphFence("step1_fence", "step2") \/ MorphFence("step2_fence", "step2_flag")
    \/ MorphFence("step2_flag_fence", "step3") \/ MorphFence("step3_fence", "flag0") \/ MorphDone
    \/ PM!Quiescent /\ UNCHANGED vars

Visible(e) ==
    CASE e.a = "Write" -> WriteStep(e)
      [] e.a = "Fence" -> FenceStep
      [] OTHER -> FALSE

\* A quiet slab with image img: nothing queued, no operation or morph in
\* flight, the vslab, counters and phase as Rebuild derives them, and the
\* user holding what the image has allocated.
InitFrom(img) ==
    LET live == IF img.hdr.ilen > 0 THEN LiveEntries(img.hdr, img.tbl) ELSE {}
    IN /\ PM!PMInit(img)
       /\ vtaken = img.bm \cup (IF live # {} THEN Pinned(live) ELSE {})
       /\ cntSlab = Cardinality(live)
       /\ cntBlock = IF live # {} THEN Pins(live) ELSE [nb \in NewBlk |-> 0]
       /\ op = NoOp
       /\ morphPc = "idle"
       /\ recPc = "none"
       /\ mode = "run"
       /\ owned = Allocated(img)
       /\ phase = CASE img.hdr.ilen > 0 -> "in" [] img.hdr.cls = "A" -> "before" [] OTHER -> "after"
       /\ preLive = {}
       /\ crashPhase = "none"
       /\ crashImg = img

TraceInit == InitFrom(StartImg) /\ i = 0 /\ PrintT(<<"pmsim-reached", 0, NextExpected>>)

TraceNext ==
    /\ i < Len(Trace)
    /\ Visible(Trace[i + 1])
    /\ i' = i + 1
    /\ Reached(i', NextExpected')
=============================================================================
