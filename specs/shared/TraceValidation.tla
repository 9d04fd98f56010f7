-------------------------- MODULE TraceValidation --------------------------
(***************************************************************************)
(* What every trace specification shares (`pmsim specs validate`). A      *)
(* trace specification extends its specification and the generated        *)
(* module TraceData, whose one definition Trace is the mapped trace (a     *)
(* sequence of records, one per step, each naming the action it must be),  *)
(* and keeps an index i of the steps matched so far. Its next-state        *)
(* relation is the action Trace[i + 1] names, constrained by the step's    *)
(* fields, with i' = i + 1 (or one of the spec's hidden actions, volatile  *)
(* steps the trace does not show, with i unchanged). So TLC explores only  *)
(* the states consistent with the trace.                                   *)
(*                                                                         *)
(* The runner reads the deepest index reached from the Reached lines       *)
(* printed here: the trace's length is the success (TLC ends without an    *)
(* error and without printing a behaviour, which for a long trace would    *)
(* take longer than checking it); anything less names the first step no    *)
(* state could take, with the actions the spec expected there.             *)
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
