-------------------------- MODULE TraceValidation --------------------------
(***************************************************************************)
(* What every trace specification shares (`pmsim specs validate`). A      *)
(* trace specification instantiates its specification, takes the mapped   *)
(* trace as the constant Trace (a sequence of records, one per event, each *)
(* naming the action it must be) and an index i of events matched so far. *)
(* Its next-state relation is either the action Trace[i + 1] names,        *)
(* constrained by the event's fields, with i' = i + 1, or one of the       *)
(* spec's hidden actions (volatile steps the trace does not show) with i   *)
(* unchanged. So TLC explores only the states consistent with the trace.   *)
(*                                                                         *)
(* The invariant NotDone is violated exactly when the whole trace was      *)
(* matched: that "violation" is the success. Otherwise the runner reads    *)
(* the deepest index reached from the Reached lines printed here, with the *)
(* actions the spec would have taken next in the states at that index.    *)
(***************************************************************************)
EXTENDS Naturals, Sequences, TLC

\* Register 1 holds the deepest index printed so far (one TLC worker).
ASSUME TLCSet(1, 0)

\* Prints "pmsim-reached" with the index and what the state expects next,
\* for every state at an index at least as deep as any printed before.
Reached(i, expected) ==
    IF i >= TLCGet(1)
    THEN TLCSet(1, i) /\ PrintT(<<"pmsim-reached", i, expected>>)
    ELSE TRUE
=============================================================================
