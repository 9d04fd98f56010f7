-------------------------- MODULE PersistencyModel --------------------------
(***************************************************************************)
(* The persistency model every pmsim specification shares (the one        *)
(* ARCHITECTURE.md describes for crash states): x86 with ADR (Px86).       *)
(*                                                                         *)
(* Per cache line there is a volatile value (what loads see) and a         *)
(* persisted value (what survives a crash). A store updates the volatile   *)
(* value and joins the line's queue of not-yet-durable stores. A flush of  *)
(* the line marks the stores queued so far; the next fence makes them      *)
(* durable. Stores to one line reach PM in program order, so a crash keeps *)
(* for every line some prefix of its queue (independently per line) and    *)
(* drops all volatile state.                                               *)
(*                                                                         *)
(* With EADR the caches are in the persistence domain: a store is durable  *)
(* at once, in global store order, and flushes and fences change nothing.  *)
(*                                                                         *)
(* A specification instantiates this module with its own set of Lines and *)
(* the four variables, and writes through Write / WriteFlush / Flush /     *)
(* Fence; each of these is one step of the specification, so a crash can   *)
(* fall between any two of them. Several stores in one step lose no crash *)
(* state as long as no fence falls between them (a crash after the last    *)
(* store may still keep any prefix of each line's queue). Flush and fence  *)
(* as one step (Persist) lose none either: a flush alone makes nothing     *)
(* durable. Matches the primitives of model/src/pm.rs: store, flush,       *)
(* fence, persist (= flush + fence).                                       *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets, TLC

CONSTANTS Lines,  \* the cache lines a specification names
          EADR    \* TRUE: caches in the persistence domain

VARIABLES vol,    \* line -> value loads see
          pend,   \* line -> sequence of values stored but not yet durable
          fl,     \* line -> how many of pend's values a flush has covered
          dur     \* line -> value in PM

pmVars == <<vol, pend, fl, dur>>

PMTypeOK ==
    /\ DOMAIN vol = Lines /\ DOMAIN dur = Lines
    /\ \A l \in Lines : fl[l] \in 0..Len(pend[l])

\* All lines start durable with the values of init.
PMInit(init) ==
    /\ vol = init
    /\ dur = init
    /\ pend = [l \in Lines |-> <<>>]
    /\ fl = [l \in Lines |-> 0]

\* Stores the sequence vs[l] of values to each line l of DOMAIN vs, in order,
\* then flushes the lines of F.
WriteSeqs(vs, F) ==
    LET D == DOMAIN vs IN
    IF EADR
    THEN /\ vol' = [l \in Lines |-> IF l \in D THEN vs[l][Len(vs[l])] ELSE vol[l]]
         /\ dur' = vol'
         /\ UNCHANGED <<pend, fl>>
    ELSE /\ vol' = [l \in Lines |-> IF l \in D THEN vs[l][Len(vs[l])] ELSE vol[l]]
         /\ pend' = [l \in Lines |-> IF l \in D THEN pend[l] \o vs[l] ELSE pend[l]]
         /\ fl' = [l \in Lines |-> IF l \in F THEN Len(pend'[l]) ELSE fl[l]]
         /\ UNCHANGED dur

\* One store per line of DOMAIN f (f: line -> new value), not flushed.
Write(f) == WriteSeqs([l \in DOMAIN f |-> <<f[l]>>], {})

\* One store per line of DOMAIN f, each line then flushed (no fence yet).
WriteFlush(f) == WriteSeqs([l \in DOMAIN f |-> <<f[l]>>], DOMAIN f)

\* Flushes the lines of L (clwb): covers their queued stores.
Flush(L) ==
    /\ fl' = [l \in Lines |-> IF l \in L /\ ~EADR THEN Len(pend[l]) ELSE fl[l]]
    /\ UNCHANGED <<vol, pend, dur>>

\* The fence after flushes: every flushed store is durable.
FenceState(p, f, d) ==
    [ pend |-> [l \in Lines |-> SubSeq(p[l], f[l] + 1, Len(p[l]))],
      dur  |-> [l \in Lines |-> IF f[l] = 0 THEN d[l] ELSE p[l][f[l]]] ]

Fence ==
    LET s == FenceState(pend, fl, dur) IN
    /\ pend' = s.pend
    /\ dur' = s.dur
    /\ fl' = [l \in Lines |-> 0]
    /\ UNCHANGED vol

\* Flush of the lines of L, then a fence (model/src/pm.rs persist).
Persist(L) ==
    LET f == [l \in Lines |-> IF l \in L /\ ~EADR THEN Len(pend[l]) ELSE fl[l]]
        s == FenceState(pend, f, dur) IN
    /\ pend' = s.pend
    /\ dur' = s.dur
    /\ fl' = [l \in Lines |-> 0]
    /\ UNCHANGED vol

\* A store to line l, its flush and a fence as one step (write_header and
\* other store-then-persist sequences). Exact when the step starts
\* Quiescent: the crash images of the steps in between are those before
\* and after it. Elsewhere a specification uses Write / Flush / Fence.
StorePersist(l, v) ==
    LET p == [pend EXCEPT ![l] = Append(@, v)]
        s == FenceState(p, [fl EXCEPT ![l] = Len(p[l])], dur) IN
    /\ vol' = [vol EXCEPT ![l] = v]
    /\ pend' = IF EADR THEN pend ELSE s.pend
    /\ dur' = IF EADR THEN vol' ELSE s.dur
    /\ fl' = [k \in Lines |-> 0]

\* Every line's queued stores are durable (nothing in flight).
Quiescent == \A l \in Lines : pend[l] = <<>>

\* What line l may hold after a crash: its durable value or the value after
\* any prefix of its queue.
CrashOptions(l) == {dur[l]} \cup {pend[l][i] : i \in 1..Len(pend[l])}

\* The PM images a crash may leave: every combination of per-line options,
\* built over the lines with queued stores only.
RECURSIVE ImagesOver(_)
ImagesOver(S) ==
    IF S = {} THEN {dur}
    ELSE LET l == CHOOSE x \in S : TRUE
         IN UNION { {[img EXCEPT ![l] = v] : v \in CrashOptions(l)} : img \in ImagesOver(S \ {l}) }

CrashImages == ImagesOver({l \in Lines : pend[l] # <<>>})

\* The crash itself: PM holds img, caches and queues are gone.
CrashTo(img) ==
    /\ dur' = img
    /\ vol' = img
    /\ pend' = [l \in Lines |-> <<>>]
    /\ fl' = [l \in Lines |-> 0]
=============================================================================
