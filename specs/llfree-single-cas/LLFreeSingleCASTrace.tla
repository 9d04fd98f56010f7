------------------------ MODULE LLFreeSingleCASTrace ------------------------
(***************************************************************************)
(* Trace validation of LLFreeSingleCAS (`pmsim specs validate`): a run of  *)
(* pmsim's LLFree, mapped event by event to the spec's actions by          *)
(* specs/src/validate/llfree.rs, must be a behaviour of the spec. Visible: *)
(* AllocBegin / FreeBegin (op_begin), the CASes on child entries and bit   *)
(* fields (a decrement: LowerBase, or DecAfterSet after the bit; SetBit,   *)
(* LowerHuge, ClearBit, IncCounter, FreeHuge), a flush of a modelled line and the fence after it         *)
(* (Commit) and op_end (Return, or Failed for an allocation that found no  *)
(* frame). Hidden (volatile, not in the trace): Upper and an allocation    *)
(* giving up in its tree.                                                  *)
(*                                                                         *)
(* A trace is checked in windows, each one tree (Trees = 1, N its          *)
(* children) from the state the trace gives it at the window's start:      *)
(* TraceData's StartChildren (the child entries), StartBits (the bit       *)
(* fields), StartFree (their free frames) and StartOwned (the allocations  *)
(* callers hold); every line durable, no operation in flight, no tree      *)
(* reserved (the upper level is volatile: any reservation is reachable).   *)
(***************************************************************************)
EXTENDS LLFreeSingleCAS, TraceValidation, TraceData

VARIABLE i

tvars == <<vars, i>>

\* The action the CPU's pc makes it take next.
ExpectedOf(p) ==
    CASE pc[p] = "idle" -> "AllocBegin or FreeBegin"
      [] pc[p] = "upper" -> "Upper"
      [] pc[p] = "lower" -> IF opr[p].o = "base" THEN "LowerBase" ELSE "LowerHuge"
      [] pc[p] = "set_bit" -> "SetBit"
      [] pc[p] = "dec" -> "DecAfterSet"
      [] pc[p] = "commit" -> "Commit"
      [] pc[p] = "persist" -> "Return"
      [] pc[p] = "clear_bit" -> "ClearBit"
      [] pc[p] = "inc" -> "IncCounter"
      [] pc[p] = "free_huge" -> "FreeHuge"
      [] OTHER -> pc[p]

NextExpected == IF i < Len(Trace) THEN ExpectedOf(Trace[i + 1].p) ELSE "nothing"

\* The action event e names, with the event's fields as constraints.
Visible(e) ==
    CASE e.a = "AllocBegin" -> AllocBegin(e.p, e.o)
      [] e.a = "SetBit" -> SetBitIn(e.p, {e.b}) /\ pc'[e.p] # "idle" /\ opr'[e.p].a = <<"base", e.c, e.b>>
      [] e.a = "DecCounter" -> \/ LowerBaseIn(e.p, {e.c}) /\ pc'[e.p] # "upper" /\ opr'[e.p].c = e.c
                               \/ DecAfterSet(e.p) /\ opr[e.p].c = e.c
      [] e.a = "LowerHuge" -> LowerHugeIn(e.p, {e.c}) /\ pc'[e.p] # "upper" /\ opr'[e.p].c = e.c
      [] e.a = "Commit" -> Commit(e.p) /\ opr[e.p].line = e.line
      [] e.a = "Return" -> Return(e.p) /\ (e.r = <<>> \/ opr[e.p].a = e.r)
      [] e.a = "Failed" -> pc[e.p] = "idle" /\ UNCHANGED vars
      \* The allocations holding frame <<c, b>>: its base frame, or its child's huge frame.
      [] e.a = "FreeBegin" -> \E a \in {<<"base", e.c, e.b>>, <<"huge", e.c>>} \cap owned : FreeBegin(e.p, a)
      [] e.a = "ClearBit" -> ClearBit(e.p) /\ opr[e.p].c = e.c /\ opr[e.p].a[3] = e.b
      [] e.a = "IncCounter" -> IncCounter(e.p) /\ opr[e.p].c = e.c
      [] e.a = "FreeHuge" -> FreeHuge(e.p) /\ opr[e.p].c = e.c
      [] OTHER -> FALSE

\* Volatile steps: the upper level, and an allocation giving up in its tree.
Hidden ==
    \E p \in CPUs :
        \/ Upper(p)
        \/ LowerBaseIn(p, {}) /\ pc'[p] = "upper"
        \/ LowerHugeIn(p, {}) /\ pc'[p] = "upper"

StartImg == [l \in Lines |-> IF l[1] = "children"
                             THEN [c \in ChildrenOf(l[2]) |-> StartChildren[c]]
                             ELSE StartBits[l[2]]]

\* Init, from the window's start.
TraceInit ==
    /\ PM!PMInit(StartImg)
    /\ treeFree = [t \in TreeIds |-> StartFree]
    /\ treeRes = [t \in TreeIds |-> FALSE]
    /\ local = [p \in CPUs |-> [tree |-> 0, free |-> 0]]
    /\ pc = [p \in CPUs |-> "idle"]
    /\ opr = [p \in CPUs |-> NoOp]
    /\ mode = "run"
    /\ owned = StartOwned
    /\ lost = {}
    /\ crashOps = [p \in CPUs |-> NoOp]
    /\ stuck = FALSE
    /\ i = 0
    /\ PrintT(<<"pmsim-reached", 0, NextExpected>>)

TraceNext ==
    \/ /\ i < Len(Trace)
       /\ Visible(Trace[i + 1])
       /\ i' = i + 1
       /\ Reached(i', NextExpected')
    \/ Hidden /\ UNCHANGED i
=============================================================================
