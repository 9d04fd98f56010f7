--------------------------- MODULE LLFreeSingleCAS ---------------------------
(***************************************************************************)
(* LLFree's lower level and its per-CPU tree reservations (LLFree, ATC'23, *)
(* §3.1-3.2 and Fig. 14), in its persistent mode (§3.2.3).                 *)
(*                                                                         *)
(* Each child manages F frames: a bit field (one bit per base frame, 1 =   *)
(* taken) and a child entry with the counter of free frames (c_L, "free")  *)
(* and the huge flag (a). A base-frame allocation decrements the counter   *)
(* with a CAS, then sets a zero bit with a CAS; a huge-frame allocation    *)
(* turns free = F into free = 0 with the huge flag in one CAS. A base free *)
(* clears its bit, then increments the counter; a huge free resets the     *)
(* entry. The upper level (tree counters c_U, reserved flags, per-CPU      *)
(* counters c_P) is volatile and only steers allocations; a CPU that finds *)
(* no tree with room drains another CPU's tree and steals it, so two CPUs  *)
(* may allocate in one tree at once.                                       *)
(*                                                                         *)
(* Persistent state: the child array of a tree (one cache line, as N = 32  *)
(* two-byte entries are in the paper) and each child's bit field (one      *)
(* line: 512 bits). With EADR = FALSE the caches are not in the            *)
(* persistence domain and FlushEach says when lines are made durable:      *)
(* "cas" (what pmsim's LLFree does, model/src/llfree/lower.rs              *)
(* Lower::commit): every CAS is followed by a flush of its line and a      *)
(* fence, as a step of its own; "op" (the paper's protocol): an            *)
(* operation's CASes reach PM in no particular order across lines, and it  *)
(* flushes the lines it touched and fences before it returns. With         *)
(* EADR = TRUE every store is durable at once and nothing is flushed.      *)
(* Recovery rebuilds every counter from its bit field (a huge child keeps  *)
(* free = 0) and the upper level from the counters.                        *)
(*                                                                         *)
(* Names follow the paper and llfree-rs (child entry: free, huge; tree:    *)
(* free, reserved). The README maps every action to the function of        *)
(* pmsim's LLFree (model/src/llfree) that performs it.                     *)
(*                                                                         *)
(* Variants: "ok"; "dec_after_set": a base allocation sets its bit before  *)
(* it decrements the counter; "inc_before_clear": a base free increments   *)
(* the counter before it clears its bit; "skip_all_free": recovery skips children     *)
(* whose counter reads all free (free = F) without reading their bit       *)
(* field, the question this model answers; "huge_bits_kept": recovery     *)
(* trusts a huge child's bit field to be all zero, as the paper does and   *)
(* as Lower::rebuild does (it rejects the heap when one has bits set).     *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets, TLC

CONSTANTS CPUs,     \* the CPUs
          Trees,    \* number of trees
          N,        \* children per tree
          F,        \* frames per child (512 in LLFree; a huge frame is all of them)
          EADR,     \* caches in the persistence domain
          FlushEach, \* "cas": flush + fence after every CAS (the code); "op": once per operation (the paper)
          Variant

ASSUME FlushEach \in {"cas", "op"}
ASSUME Variant \in {"ok", "dec_after_set", "inc_before_clear", "huge_bits_kept", "skip_all_free"}

VARIABLES vol, pend, fl, dur,   \* the persistency model
          treeFree,   \* tree entry: free counter c_U
          treeRes,    \* tree entry: reserved flag r
          local,      \* per CPU: [tree (0 = none), free = c_P]
          pc,         \* per CPU: where its operation is
          opr,        \* per CPU: its operation
          mode,       \* "run" or "recovered"
          owned,      \* ghost: allocations returned to a caller and not being freed
          lost,       \* ghost: frames lost by earlier crashes
          crashOps,   \* ghost: the operation each CPU had in flight at the last crash
          stuck       \* ghost: an allocation found no zero bit after its decrement

TreeIds == 1..Trees
Children == 1..(Trees * N)
TreeOf(c) == (c - 1) \div N + 1
ChildrenOf(t) == ((t - 1) * N + 1)..(t * N)
Bits == 0..(F - 1)
ChildL(t) == <<"children", t>>
BitsL(c) == <<"bits", c>>
Lines == {ChildL(t) : t \in TreeIds} \cup {BitsL(c) : c \in Children}
PM == INSTANCE PersistencyModel

vars == <<vol, pend, fl, dur, treeFree, treeRes, local, pc, opr, mode, owned, lost, crashOps, stuck>>
upper == <<treeFree, treeRes, local>>
ghosts == <<owned, lost, crashOps, stuck>>

NoOp == [k |-> "none"]
\* Every CAS is flushed and fenced right after it (Lower::commit).
PerCas == FlushEach = "cas" /\ ~EADR
Amount(o) == IF o = "base" THEN 1 ELSE F
Entry(img, c) == img[ChildL(TreeOf(c))][c]
BitField(img, c) == img[BitsL(c)]

\* The frames an allocation covers: <<"base", c, b>> or <<"huge", c>>.
Frames(a) == IF a[1] = "base" THEN {<<a[2], a[3]>>} ELSE {<<a[2], b>> : b \in Bits}

\* Frames the persistent state marks taken.
Taken(img) == UNION {{<<c, b>> : b \in BitField(img, c)} : c \in Children}
              \cup UNION {{<<c, b>> : b \in Bits} : c \in {c \in Children : Entry(img, c).huge}}

InitImg == [l \in Lines |-> IF l[1] = "children"
                            THEN [c \in ChildrenOf(l[2]) |-> [free |-> F, huge |-> FALSE]]
                            ELSE {}]

Init ==
    /\ PM!PMInit(InitImg)
    /\ treeFree = [t \in TreeIds |-> N * F]
    /\ treeRes = [t \in TreeIds |-> FALSE]
    /\ local = [p \in CPUs |-> [tree |-> 0, free |-> 0]]
    /\ pc = [p \in CPUs |-> "idle"]
    /\ opr = [p \in CPUs |-> NoOp]
    /\ mode = "run"
    /\ owned = {}
    /\ lost = {}
    /\ crashOps = [p \in CPUs |-> NoOp]
    /\ stuck = FALSE

SetEntry(c, e) == [vol[ChildL(TreeOf(c))] EXCEPT ![c] = e]

\* After a CAS to line l: the operation record becomes o and the CPU goes on
\* at next, under PerCas through Commit, which flushes l and fences first.
Then(p, o, next, l) ==
    IF PerCas
    THEN /\ pc' = [pc EXCEPT ![p] = "commit"]
         /\ opr' = [opr EXCEPT ![p] = [o EXCEPT !.next = next, !.line = l]]
    ELSE /\ pc' = [pc EXCEPT ![p] = next]
         /\ opr' = [opr EXCEPT ![p] = o]

\* Lower::commit: the flush of the line the last CAS changed, and a fence.
Commit(p) ==
    /\ mode = "run" /\ pc[p] = "commit"
    /\ PM!Persist({opr[p].line})
    /\ pc' = [pc EXCEPT ![p] = opr[p].next]
    /\ UNCHANGED <<upper, opr, mode, ghosts>>

(***************************************************************************)
(* Allocation (Fig. 14a).                                                  *)
(***************************************************************************)
AllocBegin(p, o) ==
    /\ mode = "run" /\ pc[p] = "idle"
    /\ pc' = [pc EXCEPT ![p] = "upper"]
    /\ opr' = [opr EXCEPT ![p] = [k |-> "alloc", o |-> o, t |-> 0, c |-> 0, a |-> <<>>, next |-> "", line |-> <<>>, retry |-> FALSE]]
    /\ UNCHANGED <<vol, pend, fl, dur, upper, mode, ghosts>>

\* (1) Take 2^o from the CPU's counter c_P; else sync it with the tree's c_U;
\* else reserve another tree, draining (stealing) it from its CPU if needed.
\* After a GiveUp only the last (reserve) applies: the current tree is never
\* picked again (LlFreeThread::get, Upper::reserve).
Upper(p) ==
    /\ mode = "run" /\ pc[p] = "upper"
    /\ LET need == Amount(opr[p].o)
           mine == local[p].tree
       IN IF mine # 0 /\ ~opr[p].retry /\ local[p].free + treeFree[mine] >= need
          THEN /\ local' = [local EXCEPT ![p].free = local[p].free + treeFree[mine] - need]
               /\ treeFree' = [treeFree EXCEPT ![mine] = 0]
               /\ pc' = [pc EXCEPT ![p] = "lower"]
               /\ opr' = [opr EXCEPT ![p].t = mine]
               /\ UNCHANGED treeRes
          ELSE LET owner(t) == {q \in CPUs \ {p} : local[q].tree = t}
                   avail(t) == treeFree[t] + (IF owner(t) # {} THEN local[CHOOSE q \in owner(t) : TRUE].free ELSE 0)
                   cands == {t \in TreeIds \ {mine} : avail(t) >= need}
               IN IF cands = {}
                  THEN \* no memory: the allocation fails
                       /\ pc' = [pc EXCEPT ![p] = "idle"]
                       /\ opr' = [opr EXCEPT ![p] = NoOp]
                       /\ UNCHANGED <<treeFree, treeRes, local>>
                  ELSE \E t \in cands :
                       LET drained == {q \in CPUs : q # p /\ local[q].tree = t} IN
                       /\ local' = [q \in CPUs |->
                                      IF q = p THEN [tree |-> t, free |-> avail(t) - need]
                                      ELSE IF q \in drained THEN [tree |-> 0, free |-> 0]
                                      ELSE local[q]]
                       /\ treeFree' = [u \in TreeIds |->
                                         IF u = t THEN 0
                                         ELSE IF u = mine THEN treeFree[u] + local[p].free
                                         ELSE treeFree[u]]
                       /\ treeRes' = [u \in TreeIds |-> IF u = t THEN TRUE ELSE IF u = mine THEN FALSE ELSE treeRes[u]]
                       /\ pc' = [pc EXCEPT ![p] = "lower"]
                       /\ opr' = [opr EXCEPT ![p].t = t]
    /\ UNCHANGED <<vol, pend, fl, dur, mode, ghosts>>

\* The upper-level counter of the frame's tree: c_P if this CPU has it reserved, else c_U.
CreditUpper(p, t, n) ==
    IF local[p].tree = t
    THEN /\ local' = [local EXCEPT ![p].free = @ + n]
         /\ UNCHANGED treeFree
    ELSE /\ treeFree' = [treeFree EXCEPT ![t] = @ + n]
         /\ UNCHANGED local

\* Gives back what the upper level took when the lower level has no room
\* (fragmented for this order), then looks for another tree.
GiveUp(p) ==
    /\ CreditUpper(p, opr[p].t, Amount(opr[p].o))
    /\ pc' = [pc EXCEPT ![p] = "upper"]
    /\ opr' = [opr EXCEPT ![p].retry = TRUE]
    /\ UNCHANGED <<vol, pend, fl, dur, treeRes>>

\* (2a) Base frame: decrement a child's counter with a CAS (free >= 1, not huge).
\* Variant dec_after_set only checks the counter here. LowerBaseIn(p, C)
\* takes only the children of C (the spec's action is C = Children; trace
\* validation names the one child the trace shows, and TLC then builds one
\* successor state instead of one per candidate).
LowerBaseIn(p, C) ==
    /\ mode = "run" /\ pc[p] = "lower" /\ opr[p].o = "base"
    /\ LET ok(c) == ~Entry(vol, c).huge /\ Entry(vol, c).free >= 1
           cands == {c \in ChildrenOf(opr[p].t) : ok(c)}
       IN IF cands = {} THEN GiveUp(p)
          ELSE \E c \in cands \cap C :
               /\ IF Variant = "dec_after_set"
                  THEN /\ UNCHANGED <<vol, pend, fl, dur>>
                       /\ pc' = [pc EXCEPT ![p] = "set_bit"]
                       /\ opr' = [opr EXCEPT ![p].c = c]
                  ELSE /\ PM!Write(ChildL(TreeOf(c)) :> SetEntry(c, [Entry(vol, c) EXCEPT !.free = @ - 1]))
                       /\ Then(p, [opr[p] EXCEPT !.c = c], "set_bit", ChildL(TreeOf(c)))
               /\ UNCHANGED <<treeFree, treeRes, local>>
    /\ UNCHANGED <<mode, ghosts>>

LowerBase(p) == LowerBaseIn(p, Children)

\* (2a) then set a zero bit of its bit field with a CAS (SetBitIn: one of B).
SetBitIn(p, B) ==
    /\ mode = "run" /\ pc[p] = "set_bit"
    /\ LET c == opr[p].c
           zeros == Bits \ BitField(vol, c)
       IN IF zeros = {}
          THEN \* the counter promised a frame the bit field does not have
               /\ stuck' = TRUE
               /\ pc' = [pc EXCEPT ![p] = "idle"]
               /\ opr' = [opr EXCEPT ![p] = NoOp]
               /\ UNCHANGED <<vol, pend, fl, dur, owned, lost, crashOps>>
          ELSE \E b \in zeros \cap B :
               /\ PM!Write(BitsL(c) :> (BitField(vol, c) \cup {b}))
               /\ Then(p, [opr[p] EXCEPT !.a = <<"base", c, b>>],
                       IF Variant = "dec_after_set" THEN "dec" ELSE "persist", BitsL(c))
               /\ UNCHANGED <<owned, lost, crashOps, stuck>>
    /\ UNCHANGED <<upper, mode>>

SetBit(p) == SetBitIn(p, Bits)

\* Variant dec_after_set: the counter decrement comes last.
DecAfterSet(p) ==
    /\ mode = "run" /\ pc[p] = "dec"
    /\ LET c == opr[p].c IN
       /\ PM!Write(ChildL(TreeOf(c)) :> SetEntry(c, [Entry(vol, c) EXCEPT !.free = @ - 1]))
       /\ Then(p, opr[p], "persist", ChildL(TreeOf(c)))
    /\ UNCHANGED <<upper, mode, ghosts>>

\* (2b) Huge frame: free = F to free = 0 with the huge flag, one CAS
\* (LowerHugeIn: in a child of C).
LowerHugeIn(p, C) ==
    /\ mode = "run" /\ pc[p] = "lower" /\ opr[p].o = "huge"
    /\ LET cands == {c \in ChildrenOf(opr[p].t) : ~Entry(vol, c).huge /\ Entry(vol, c).free = F}
       IN IF cands = {} THEN GiveUp(p)
          ELSE \E c \in cands \cap C :
               /\ PM!Write(ChildL(TreeOf(c)) :> SetEntry(c, [free |-> 0, huge |-> TRUE]))
               /\ Then(p, [opr[p] EXCEPT !.c = c, !.a = <<"huge", c>>], "persist", ChildL(TreeOf(c)))
               /\ UNCHANGED <<treeFree, treeRes, local>>
    /\ UNCHANGED <<mode, ghosts>>

LowerHuge(p) == LowerHugeIn(p, Children)

\* The lines an operation touched.
Touched(o) == {ChildL(TreeOf(o.c))} \cup (IF o.a # <<>> /\ o.a[1] = "base" THEN {BitsL(o.c)} ELSE {})

\* Return: under FlushEach = "op" flush the touched lines and fence first
\* (no-op under EADR); under "cas" every line is already durable.
Return(p) ==
    /\ mode = "run" /\ pc[p] = "persist"
    /\ IF PerCas THEN UNCHANGED <<vol, pend, fl, dur>> ELSE PM!Persist(Touched(opr[p]))
    /\ owned' = IF opr[p].k = "alloc" THEN owned \cup {opr[p].a} ELSE owned
    /\ pc' = [pc EXCEPT ![p] = "idle"]
    /\ opr' = [opr EXCEPT ![p] = NoOp]
    /\ UNCHANGED <<upper, mode, lost, crashOps, stuck>>

(***************************************************************************)
(* Free (Fig. 14b), by any CPU.                                            *)
(***************************************************************************)
\* (1) The child entry is checked: a base frame's child is not huge and has
\* room; a huge frame's child has the huge flag.
FreeBegin(p, a) ==
    /\ mode = "run" /\ pc[p] = "idle" /\ a \in owned
    /\ IF a[1] = "base" THEN ~Entry(vol, a[2]).huge /\ Entry(vol, a[2]).free <= F - 1
       ELSE Entry(vol, a[2]).huge
    /\ owned' = owned \ {a}
    /\ pc' = [pc EXCEPT ![p] = CASE a[1] = "huge" -> "free_huge"
                                  [] Variant = "inc_before_clear" -> "inc"
                                  [] OTHER -> "clear_bit"]
    /\ opr' = [opr EXCEPT ![p] = [k |-> "free", o |-> a[1], t |-> TreeOf(a[2]), c |-> a[2], a |-> a, next |-> "", line |-> <<>>]]
    /\ UNCHANGED <<vol, pend, fl, dur, upper, mode, lost, crashOps, stuck>>

\* (2): clear the bit with a CAS.
ClearBit(p) ==
    /\ mode = "run" /\ pc[p] = "clear_bit"
    /\ LET c == opr[p].c IN
       /\ PM!Write(BitsL(c) :> (BitField(vol, c) \ {opr[p].a[3]}))
       /\ Then(p, opr[p], IF Variant = "inc_before_clear" THEN "persist" ELSE "inc", BitsL(c))
    /\ UNCHANGED <<upper, mode, ghosts>>

\* (3) + (4): increment the counter with a CAS, then the upper level.
IncCounter(p) ==
    /\ mode = "run" /\ pc[p] = "inc"
    /\ LET c == opr[p].c IN
       /\ PM!Write(ChildL(TreeOf(c)) :> SetEntry(c, [Entry(vol, c) EXCEPT !.free = @ + 1]))
       /\ CreditUpper(p, TreeOf(c), 1)
       /\ Then(p, opr[p], IF Variant = "inc_before_clear" THEN "clear_bit" ELSE "persist", ChildL(TreeOf(c)))
    /\ UNCHANGED <<treeRes, mode, ghosts>>

\* (1b): clear the huge flag and set free = F in one CAS.
FreeHuge(p) ==
    /\ mode = "run" /\ pc[p] = "free_huge"
    /\ LET c == opr[p].c IN
       /\ PM!Write(ChildL(TreeOf(c)) :> SetEntry(c, [free |-> F, huge |-> FALSE]))
       /\ CreditUpper(p, TreeOf(c), F)
       /\ Then(p, opr[p], "persist", ChildL(TreeOf(c)))
    /\ UNCHANGED <<treeRes, mode, ghosts>>

(***************************************************************************)
(* Crash and recovery. Recovery runs before anything else and, being a     *)
(* pure function of the bit fields, is one step here.                      *)
(***************************************************************************)
\* The counter recovery writes for child c of image img. A huge child's bit
\* field is cleared: without caches in the persistence domain it may hold
\* bits of base allocations made after a huge free whose entry never became
\* durable (variant huge_bits_kept keeps them, as the paper's recovery does).
RecoveredEntry(img, c) ==
    LET e == Entry(img, c) IN
    IF e.huge THEN [free |-> 0, huge |-> TRUE]
    ELSE IF Variant = "skip_all_free" /\ e.free = F THEN e   \* skipped: its bit field is not read
    ELSE [free |-> F - Cardinality(BitField(img, c)), huge |-> FALSE]

RecoverImage(img) ==
    [l \in Lines |-> IF l[1] = "children"
                     THEN [c \in ChildrenOf(l[2]) |-> RecoveredEntry(img, c)]
                     ELSE IF Entry(img, l[2]).huge /\ Variant # "huge_bits_kept" THEN {}
                     ELSE img[l]]

CrashAndRecover ==
    /\ mode = "run"
    /\ \E img \in PM!CrashImages :
          LET r == RecoverImage(img) IN
          /\ PM!CrashTo(r)
          /\ treeFree' = [t \in TreeIds |-> LET S == ChildrenOf(t) IN
                            LET RECURSIVE Sum(_)
                                Sum(X) == IF X = {} THEN 0
                                          ELSE LET c == CHOOSE c \in X : TRUE IN r[ChildL(t)][c].free + Sum(X \ {c})
                            IN Sum(S)]
    /\ treeRes' = [t \in TreeIds |-> FALSE]
    /\ local' = [p \in CPUs |-> [tree |-> 0, free |-> 0]]
    /\ crashOps' = opr
    /\ pc' = [p \in CPUs |-> "idle"]
    /\ opr' = [p \in CPUs |-> NoOp]
    /\ mode' = "recovered"
    /\ UNCHANGED <<owned, lost, stuck>>

\* Back to work; frames taken but held by nobody stay lost.
Resume ==
    /\ mode = "recovered"
    /\ lost' = Taken(vol) \ UNION {Frames(a) : a \in owned}
    /\ crashOps' = [p \in CPUs |-> NoOp]
    /\ mode' = "run"
    /\ UNCHANGED <<vol, pend, fl, dur, upper, pc, opr, owned, stuck>>

Next ==
    \/ \E p \in CPUs :
          \/ \E o \in {"base", "huge"} : AllocBegin(p, o)
          \/ Upper(p) \/ LowerBase(p) \/ SetBit(p) \/ DecAfterSet(p) \/ LowerHuge(p) \/ Commit(p) \/ Return(p)
          \/ \E a \in owned : FreeBegin(p, a)
          \/ ClearBit(p) \/ IncCounter(p) \/ FreeHuge(p)
    \/ CrashAndRecover \/ Resume

Spec == Init /\ [][Next]_vars

(***************************************************************************)
(* Invariants                                                              *)
(***************************************************************************)
TypeOK ==
    /\ PM!PMTypeOK
    /\ mode \in {"run", "recovered"}
    /\ \A p \in CPUs : local[p].tree \in 0..Trees

\* Allocations held by callers or claimed by an allocation in flight.
Claimed == owned \cup {opr[p].a : p \in {p \in CPUs : opr[p] # NoOp /\ opr[p].k = "alloc" /\ opr[p].a # <<>>}}

\* No frame is allocated twice, and after a crash every allocation a caller
\* holds is still taken (else it could be handed out again). Two distinct
\* allocations share a frame only if one is huge and the other is in its
\* child (two base frames or two huge frames that differ never overlap), so
\* the pairwise check of the frames is written as that: linear in the
\* allocations, which a recorded run holds by the thousand.
NoFrameAllocatedTwice ==
    /\ LET hugeChildren == {a[2] : a \in {a \in Claimed : a[1] = "huge"}}
       IN \A a \in Claimed : a[1] = "base" => a[2] \notin hugeChildren
    /\ mode = "recovered" => \A a \in owned : Frames(a) \subseteq Taken(vol)

\* Counters stay within their bounds.
CountersInBounds ==
    /\ \A c \in Children : Entry(vol, c).free \in 0..F
    /\ \A t \in TreeIds : treeFree[t] \in 0..(N * F)
    /\ \A p \in CPUs : local[p].free \in 0..(N * F)

\* After recovery every counter equals its bit field (a huge child: 0, bits clear).
CountersMatchBitFields ==
    mode = "recovered" =>
        \A c \in Children :
            IF Entry(vol, c).huge THEN Entry(vol, c).free = 0 /\ BitField(vol, c) = {}
            ELSE Entry(vol, c).free = F - Cardinality(BitField(vol, c))

\* A crash loses at most the allocation each CPU had in flight.
AtMostOneFrameLostPerCPU ==
    mode = "recovered" =>
        Taken(vol) \ (UNION {Frames(a) : a \in owned} \cup lost)
            \subseteq UNION {Frames(crashOps[p].a) : p \in {p \in CPUs : crashOps[p] # NoOp /\ crashOps[p].a # <<>>}}

\* An allocation that got past the counter always finds a zero bit.
NoAllocationStuck == ~stuck
=============================================================================
