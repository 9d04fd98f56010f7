-------------------------- MODULE BookkeepingLogGC --------------------------
(***************************************************************************)
(* NVAlloc's log-structured bookkeeping (NVAlloc §5.3, Fig. 7-8) as pmsim  *)
(* implements it in model/src/mech/bklog.rs (BkLog).                       *)
(*                                                                         *)
(* Extent records ("normal entries") are appended to the tail chunk of a   *)
(* linked list of chunks, K records each; freeing an extent appends a      *)
(* tombstone naming its record's position (chunk id, slot). The log header *)
(* holds two list heads and the alt bit naming the current one. Fast GC    *)
(* unlinks chunks whose vchunk bitmap is empty; slow GC copies the live    *)
(* records to a new list built from free chunks, flips alt, and recycles   *)
(* the old chunks. Recovery (BkLog::recover) replays the list named by the *)
(* durable alt bit, applying the tombstones.                               *)
(*                                                                         *)
(* Persistent cache lines: the log header, and one line per chunk holding  *)
(* its header (id, next, active) and its K records. In the code the header *)
(* sits in a table beside the chunk and the records span 16 lines; every   *)
(* step here that stores to several of those lines flushes them all and    *)
(* the next fence makes them durable before any list reaches the chunk, so *)
(* splitting them would only add crash images in which no list reaches it. *)
(*                                                                         *)
(* Log operations run one at a time (the large allocator's lock). Crashes  *)
(* fall between any two persistence steps; recovery only reads.           *)
(*                                                                         *)
(* Variants: "ok" is the code; "alt_before_list" flips alt while the new   *)
(* list's chunks are not yet durable (slow_gc without init_chunk's         *)
(* flushes); "index_positions" names records by chunk index rather than by *)
(* chunk id, so a tombstone can outlive its target's chunk and hit a later *)
(* record in the same chunk.                                               *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets, TLC

CONSTANTS NChunks,   \* chunks in the log area
          K,         \* records per chunk (CHUNK_RECORDS)
          Interleave, \* 0: the k-th record of a chunk goes to slot k; n: to line k % n (BkLog::slot_of)
          Extents,   \* the large extents the heap can hold (their start offsets)
          MaxId,     \* bound on chunk ids (next_id), to keep the model finite
          Variant

ASSUME Variant \in {"ok", "alt_before_list", "index_positions"}
ASSUME Interleave = 0 \/ (Interleave \in 1..K /\ K % Interleave = 0)

VARIABLES vol, pend, fl, dur,   \* the persistency model
          alt,        \* BkLog.alt
          list,       \* BkLog.list: chunk indices in id order
          vid,        \* chunk index -> id of its current incarnation
          vlive,      \* VChunk.live: live records and live tombstones, by slot
          fill,       \* VChunk.fill
          tinto,      \* VChunk.tombs_into: <<holder chunk, slot>> of tombstones aimed here
          free,       \* BkLog.free
          nextId,     \* BkLog.next_id
          pos,        \* extent -> its record's position (the LiveExtent pos), or NoPos
          building,   \* chunks being initialised (not yet linked)
          op,         \* the append or delete in flight
          gc,         \* the slow GC in flight
          mode,       \* "run" or "down" (crashed, before recovery)
          ack,        \* ghost: extents whose allocation was acknowledged and not freed
          gcSnap,     \* ghost: the live extents when the GC in flight began
          crashOp,    \* ghost: the operation in flight at the crash
          crashGc     \* ghost: whether a slow GC was in flight at the crash

Chunks == 1..NChunks
Slots == 0..(K - 1)
\* The physical slot of a chunk's k-th record (0-based), and its inverse:
\* interleaved, consecutive records land on different lines (BkLog::slot_of).
Slot(k) == IF Interleave = 0 THEN k ELSE (k % Interleave) * (K \div Interleave) + k \div Interleave
InvSlot(s) == IF Interleave = 0 THEN s ELSE (s % (K \div Interleave)) * Interleave + s \div (K \div Interleave)
HdrL == <<"hdr", 0>>
ChL(c) == <<"chunk", c>>
Lines == {HdrL} \cup {ChL(c) : c \in Chunks}
EADR == FALSE
PM == INSTANCE PersistencyModel

vars == <<vol, pend, fl, dur, alt, list, vid, vlive, fill, tinto, free, nextId, pos, building,
          op, gc, mode, ack, gcSnap, crashOp, crashGc>>
logVars == <<alt, list, vid, vlive, fill, tinto, free, nextId, pos, building>>

NoPos == [c |-> 0, s |-> 0]
NoOp == [k |-> "none"]
GcIdle == [st |-> "idle"]
Empty == [t |-> "none"]
\* The name a tombstone stores for the record at slot s of chunk c, id i.
PosName(c, i, s) == IF Variant = "index_positions" THEN <<c, s>> ELSE <<i, s>>

TailChunk == list[Len(list)]
TailFull == IF list = <<>> THEN TRUE ELSE fill[TailChunk] = K
ListHead(img) == img[HdrL].heads[img[HdrL].alt + 1]

(***************************************************************************)
(* Replay of a PM image (BkLog::recover): follow the list named by alt,    *)
(* check every chunk is active with increasing ids, collect records and    *)
(* tombstones, drop every record a tombstone names.                        *)
(***************************************************************************)
RECURSIVE Walk(_, _, _)
Walk(img, c, seen) ==
    IF c = 0 THEN <<>>
    ELSE IF c \in seen THEN <<0>>
    ELSE <<c>> \o Walk(img, img[ChL(c)].next, seen \cup {c})

Replay(img) ==
    LET cs == Walk(img, ListHead(img), {})
        chunksOk == /\ \A i \in DOMAIN cs : cs[i] # 0 /\ img[ChL(cs[i])].active = 1
                    /\ \A i \in DOMAIN cs : i > 1 => img[ChL(cs[i-1])].id < img[ChL(cs[i])].id
        inList == {cs[i] : i \in DOMAIN cs} \ {0}
        entries == { [c |-> c, s |-> s, w |-> img[ChL(c)].rec[s],
                      p |-> PosName(c, img[ChL(c)].id, s), g |-> <<img[ChL(c)].id, s>>] :
                     c \in inList, s \in Slots }
        recs == {x \in entries : x.w.t = "ext"}
        tombs == {x \in entries : x.w.t = "tomb"}
        cancelled == {r \in recs : \E t \in tombs : t.w.tgt = r.p}
        liveRecs == recs \ cancelled
    IN [ ok |-> chunksOk /\ \A r1, r2 \in liveRecs : r1.w.e = r2.w.e => r1 = r2,
         ext |-> {r.w.e : r \in liveRecs},
         chunks |-> cs,
         recs |-> recs, tombs |-> tombs, liveRecs |-> liveRecs ]

\* Chunks reachable from the list a crash would replay.
Reachable(img) == LET cs == Walk(img, ListHead(img), {}) IN {cs[i] : i \in DOMAIN cs} \ {0}

EmptyChunk == [id |-> 0, next |-> 0, active |-> 0, rec |-> [s \in Slots |-> Empty]]

InitImg == [l \in Lines |-> IF l = HdrL THEN [heads |-> <<0, 0>>, alt |-> 0] ELSE EmptyChunk]

Init ==
    /\ PM!PMInit(InitImg)
    /\ alt = 0
    /\ list = <<>>
    /\ vid = [c \in Chunks |-> 0]
    /\ vlive = [c \in Chunks |-> {}]
    /\ fill = [c \in Chunks |-> 0]
    /\ tinto = [c \in Chunks |-> {}]
    /\ free = Chunks
    /\ nextId = 1
    /\ pos = [e \in Extents |-> NoPos]
    /\ building = {}
    /\ op = NoOp
    /\ gc = GcIdle
    /\ mode = "run"
    /\ ack = {}
    /\ gcSnap = {}
    /\ crashOp = NoOp
    /\ crashGc = FALSE

Idle == mode = "run" /\ op = NoOp /\ gc.st = "idle"

(***************************************************************************)
(* Appends (BkLog::append_word) for a large allocation (BkLog::append) or  *)
(* a large free (BkLog::delete, which appends a tombstone).                *)
(***************************************************************************)
BeginAlloc(e) ==
    /\ Idle /\ e \notin ack /\ pos[e] = NoPos
    /\ op' = [k |-> "alloc", e |-> e, st |-> "start"]
    /\ UNCHANGED <<pend, fl, dur, vol, logVars, gc, mode, ack, gcSnap, crashOp, crashGc>>

BeginFree(e) ==
    /\ Idle /\ e \in ack
    /\ op' = [k |-> "free", e |-> e, st |-> "start"]
    /\ ack' = ack \ {e}
    /\ UNCHANGED <<pend, fl, dur, vol, logVars, gc, mode, gcSnap, crashOp, crashGc>>

\* A new tail chunk: init_chunk stores its zeroed records and header and
\* flushes them; a fence follows; then the previous tail (or the head) links it.
NewChunk ==
    /\ mode = "run" /\ op # NoOp /\ op.st = "start" /\ TailFull /\ nextId <= MaxId
    /\ \E c \in free :
          /\ PM!WriteFlush(ChL(c) :> [EmptyChunk EXCEPT !.id = nextId, !.active = 1])
          /\ free' = free \ {c}
          /\ building' = {c}
          /\ vid' = [vid EXCEPT ![c] = nextId]
          /\ op' = [k |-> op.k, e |-> op.e, st |-> "init_fence", c |-> c]
    /\ nextId' = nextId + 1
    /\ UNCHANGED <<alt, list, vlive, fill, tinto, pos, gc, mode, ack, gcSnap, crashOp, crashGc>>

NewChunkFence ==
    /\ mode = "run" /\ op # NoOp /\ op.st = "init_fence"
    /\ PM!Fence
    /\ op' = [op EXCEPT !.st = "link"]
    /\ UNCHANGED <<logVars, gc, mode, ack, gcSnap, crashOp, crashGc>>

NewChunkLink ==
    /\ mode = "run" /\ op # NoOp /\ op.st = "link"
    /\ IF list = <<>>
       THEN PM!StorePersist(HdrL, [vol[HdrL] EXCEPT !.heads[alt + 1] = op.c])
       ELSE PM!StorePersist(ChL(TailChunk), [vol[ChL(TailChunk)] EXCEPT !.next = op.c])
    /\ list' = Append(list, op.c)
    /\ vlive' = [vlive EXCEPT ![op.c] = {}]
    /\ fill' = [fill EXCEPT ![op.c] = 0]
    /\ tinto' = [tinto EXCEPT ![op.c] = {}]
    /\ building' = {}
    /\ op' = [op EXCEPT !.st = "write"]
    /\ UNCHANGED <<alt, vid, free, nextId, pos, gc, mode, ack, gcSnap, crashOp, crashGc>>

\* The record or tombstone itself, persisted; then the vchunks are updated.
WriteEntry ==
    /\ mode = "run" /\ op # NoOp
    /\ op.st = "write" \/ (op.st = "start" /\ ~TailFull)
    /\ LET t == TailChunk
           s == Slot(fill[t])
           tp == pos[op.e]
           w == IF op.k = "alloc" THEN [t |-> "ext", e |-> op.e]
                ELSE [t |-> "tomb", tgt |-> PosName(tp.c, vid[tp.c], tp.s), g |-> <<vid[tp.c], tp.s>>]
       IN /\ PM!StorePersist(ChL(t), [vol[ChL(t)] EXCEPT !.rec[s] = w])
          /\ fill' = [fill EXCEPT ![t] = @ + 1]
          /\ IF op.k = "alloc"
             THEN /\ vlive' = [vlive EXCEPT ![t] = @ \cup {s}]
                  /\ pos' = [pos EXCEPT ![op.e] = [c |-> t, s |-> s]]
                  /\ ack' = ack \cup {op.e}
                  /\ UNCHANGED tinto
             ELSE /\ vlive' = IF tp.c = t THEN [vlive EXCEPT ![t] = @ \ {tp.s}]
                              ELSE [vlive EXCEPT ![tp.c] = @ \ {tp.s}, ![t] = @ \cup {s}]
                  /\ tinto' = IF tp.c = t THEN tinto ELSE [tinto EXCEPT ![tp.c] = @ \cup {<<t, s>>}]
                  /\ pos' = [pos EXCEPT ![op.e] = NoPos]
                  /\ UNCHANGED ack
    /\ op' = NoOp
    /\ UNCHANGED <<alt, list, vid, free, nextId, building, gc, mode, gcSnap, crashOp, crashGc>>

(***************************************************************************)
(* Fast GC (BkLog::fast_gc, BkLog::unlink): a chunk other than the tail    *)
(* with no live record or tombstone is unlinked by one persisted pointer   *)
(* write; the tombstones aimed into it are no longer needed.               *)
(***************************************************************************)
FastGcUnlink ==
    /\ Idle
    /\ \E i \in 1..(Len(list) - 1) :
          LET c == list[i]
              nxt == list[i + 1]
          IN /\ vlive[c] = {}
             /\ IF i = 1
                THEN PM!StorePersist(HdrL, [vol[HdrL] EXCEPT !.heads[alt + 1] = nxt])
                ELSE PM!StorePersist(ChL(list[i - 1]), [vol[ChL(list[i - 1])] EXCEPT !.next = nxt])
             /\ list' = SubSeq(list, 1, i - 1) \o SubSeq(list, i + 1, Len(list))
             /\ free' = free \cup {c}
             /\ vid' = [vid EXCEPT ![c] = 0]
             /\ fill' = [fill EXCEPT ![c] = 0]
             /\ vlive' = [h \in Chunks |-> IF h = c THEN {} ELSE vlive[h] \ {x[2] : x \in {y \in tinto[c] : y[1] = h}}]
             /\ tinto' = [tinto EXCEPT ![c] = {}]
    /\ UNCHANGED <<alt, nextId, pos, building, op, gc, mode, ack, gcSnap, crashOp, crashGc>>

(***************************************************************************)
(* Slow GC (BkLog::slow_gc): the live records are copied, K to a chunk and *)
(* in log order (chunk id, then slot), into free chunks (init_chunk:       *)
(* stored and flushed, linked to each other in the order taken) and the    *)
(* other head is pointed at the first and persisted; then alt is flipped   *)
(* and persisted; then the old chunks are free. The chunks may be taken in *)
(* any order (the code pops its free stack).                               *)
(***************************************************************************)
\* An extent's record in log order: chunk id, then physical slot.
LogKey(e) == vid[pos[e].c] * K + pos[e].s
LiveSeq == LET RECURSIVE F(_)
               F(S) == IF S = {} THEN <<>> ELSE LET m == CHOOSE x \in S : \A y \in S : LogKey(x) <= LogKey(y)
                                                IN <<m>> \o F(S \ {m})
           IN F({e \in Extents : pos[e] # NoPos})

\* Run when the list holds something to drop (a dead record or a tombstone):
\* the allocator's policy runs it when the log grows past a threshold.
SlowGcEnabled ==
    /\ Idle /\ list # <<>>
    /\ \E i \in DOMAIN list : Cardinality(vlive[list[i]]) < fill[list[i]]

\* The slow GC building its list in the chunks cs, taken in that order.
SlowGcBuildOn(cs) ==
    /\ SlowGcEnabled
    /\ LET live == LiveSeq
           need == (Len(live) + K - 1) \div K
           S == {cs[i] : i \in DOMAIN cs}
       IN /\ nextId + need - 1 <= MaxId
          /\ Len(cs) = need /\ Cardinality(S) = need /\ S \subseteq free
          /\ LET idx(c) == CHOOSE i \in 1..need : cs[i] = c
                 newAlt == 1 - alt
                 chunkLines == {ChL(c) : c \in S}
                 val(l) ==
                     LET i == idx(l[2]) IN
                     [id |-> nextId + i - 1,
                      next |-> IF i < need THEN cs[i + 1] ELSE 0,
                      active |-> 1,
                      rec |-> [s \in Slots |-> LET k == (i - 1) * K + InvSlot(s) + 1
                                              IN IF k <= Len(live) THEN [t |-> "ext", e |-> live[k]] ELSE Empty]]
                 newHdr == [vol[HdrL] EXCEPT !.heads[newAlt + 1] = IF need = 0 THEN 0 ELSE cs[1]]
                 flushed == IF Variant = "alt_before_list" THEN {HdrL} ELSE chunkLines \cup {HdrL}
             IN /\ PM!WriteSeqs([l \in chunkLines \cup {HdrL} |-> IF l = HdrL THEN <<newHdr>> ELSE <<val(l)>>],
                                flushed)
                /\ free' = free \ S
                /\ building' = S
                /\ gc' = [st |-> "head_fence", cs |-> cs, live |-> live]
                /\ vid' = [c \in Chunks |-> IF c \in S THEN nextId + idx(c) - 1 ELSE vid[c]]
          /\ nextId' = nextId + need
    /\ gcSnap' = ack
    /\ UNCHANGED <<alt, list, vlive, fill, tinto, pos, op, mode, ack, crashOp, crashGc>>

\* The orders in which the chunks of S can be taken.
Orders(S) == {f \in [1..Cardinality(S) -> S] : \A i, j \in DOMAIN f : i # j => f[i] # f[j]}

SlowGcBuild == \E S \in SUBSET free : \E cs \in Orders(S) : SlowGcBuildOn(cs)

SlowGcHeadFence ==
    /\ mode = "run" /\ gc.st = "head_fence"
    /\ PM!Fence
    /\ gc' = [gc EXCEPT !.st = "flip"]
    /\ UNCHANGED <<logVars, op, mode, ack, gcSnap, crashOp, crashGc>>

SlowGcFlip ==
    /\ mode = "run" /\ gc.st = "flip"
    /\ LET newAlt == 1 - alt
           cs == gc.cs
           live == gc.live
           n == Len(cs)
       IN /\ PM!StorePersist(HdrL, [vol[HdrL] EXCEPT !.alt = newAlt])
          /\ alt' = newAlt
          /\ free' = free \cup {list[i] : i \in DOMAIN list}
          /\ vid' = [c \in Chunks |-> IF \E i \in DOMAIN list : list[i] = c THEN 0 ELSE vid[c]]
          /\ list' = cs
          /\ vlive' = [c \in Chunks |-> {Slot((k - 1) % K) : k \in {k \in 1..Len(live) : cs[(k - 1) \div K + 1] = c}}]
          /\ fill' = [c \in Chunks |-> Cardinality({k \in 1..Len(live) : cs[(k - 1) \div K + 1] = c})]
          /\ tinto' = [c \in Chunks |-> {}]
          /\ pos' = [e \in Extents |-> IF \E k \in 1..Len(live) : live[k] = e
                                       THEN LET k == CHOOSE k \in 1..Len(live) : live[k] = e
                                            IN [c |-> cs[(k - 1) \div K + 1], s |-> Slot((k - 1) % K)]
                                       ELSE NoPos]
    /\ building' = {}
    /\ gc' = GcIdle
    /\ gcSnap' = {}
    /\ UNCHANGED <<nextId, op, mode, ack, crashOp, crashGc>>

(***************************************************************************)
(* Crash and recovery. The crash state ("down") is where the invariants on *)
(* what a recovery would find are checked; Recover then rebuilds the       *)
(* volatile log from PM as BkLog::recover does (reading only).             *)
(***************************************************************************)
Crash ==
    /\ mode = "run"
    /\ \E img \in PM!CrashImages : PM!CrashTo(img)
    /\ mode' = "down"
    /\ crashOp' = op
    /\ crashGc' = (gc.st # "idle")
    /\ UNCHANGED <<logVars, op, gc, ack, gcSnap>>

\* The volatile log BkLog::recover rebuilds from the image img, and the
\* extents it holds (what recovery resolves the acknowledged ones to);
\* meaningful where ok (a cycle leaves a 0 in the chunk list).
RecoveredLog(img) ==
    LET r == Replay(img)
        cs == r.chunks
        n == Len(cs)
        inList == {cs[i] : i \in 1..n}
        \* live: live records, and tombstones that cancelled a record of another chunk
        hits == {<<t, x>> \in r.tombs \X r.recs : t.w.tgt = x.p /\ t.c # x.c}
    IN [ok |-> r.ok,
        alt |-> img[HdrL].alt,
        list |-> cs,
        vid |-> [c \in Chunks |-> IF c \in inList THEN img[ChL(c)].id ELSE 0],
        fill |-> [c \in Chunks |-> IF c \in inList THEN Cardinality({s \in Slots : img[ChL(c)].rec[s].t # "none"}) ELSE 0],
        vlive |-> [c \in Chunks |-> {x.s : x \in {y \in r.liveRecs : y.c = c}}
                                    \cup {h[1].s : h \in {h \in hits : h[1].c = c}}],
        tinto |-> [c \in Chunks |-> {<<h[1].c, h[1].s>> : h \in {h \in hits : h[2].c = c}}],
        free |-> Chunks \ inList,
        nextId |-> IF n = 0 \/ cs[n] = 0 THEN 1 ELSE img[ChL(cs[n])].id + 1,
        pos |-> [e \in Extents |-> IF \E x \in r.liveRecs : x.w.e = e
                                  THEN LET x == CHOOSE x \in r.liveRecs : x.w.e = e IN [c |-> x.c, s |-> x.s]
                                  ELSE NoPos],
        ext |-> r.ext]

Recover ==
    /\ mode = "down"
    /\ LET v == RecoveredLog(dur)
       IN /\ v.ok
          /\ alt' = v.alt
          /\ list' = v.list
          /\ vid' = v.vid
          /\ fill' = v.fill
          /\ vlive' = v.vlive
          /\ tinto' = v.tinto
          /\ free' = v.free
          /\ nextId' = v.nextId
          /\ pos' = v.pos
          \* The operation in flight is resolved by what the log holds.
          /\ ack' = v.ext
    /\ building' = {}
    /\ op' = NoOp
    /\ gc' = GcIdle
    /\ mode' = "run"
    /\ gcSnap' = {}
    /\ crashOp' = NoOp
    /\ crashGc' = FALSE
    /\ UNCHANGED <<vol, pend, fl, dur>>

Next ==
    \/ \E e \in Extents : BeginAlloc(e) \/ BeginFree(e)
    \/ NewChunk \/ NewChunkFence \/ NewChunkLink \/ WriteEntry
    \/ FastGcUnlink
    \/ SlowGcBuild \/ SlowGcHeadFence \/ SlowGcFlip
    \/ Crash \/ Recover

Spec == Init /\ [][Next]_vars

(***************************************************************************)
(* State view for TLC (VIEW in the correct models' .cfg): while running,   *)
(* the PM content of a free chunk with nothing queued is left out. It is   *)
(* never read: a chunk is rewritten whole (NewChunk, SlowGcBuild) and      *)
(* fenced before any head or next pointer reaches it, and replay and the   *)
(* invariants follow only reachable chunks; so states that differ only     *)
(* there have the same futures. The broken variants, which do read stale   *)
(* chunks, are checked without it.                                         *)
(***************************************************************************)
Junk(l) == mode = "run" /\ l # HdrL /\ l[2] \in free /\ pend[l] = <<>>
View == <<[l \in Lines |-> IF Junk(l) THEN EmptyChunk ELSE dur[l]],
          [l \in Lines |-> IF Junk(l) THEN EmptyChunk ELSE vol[l]],
          pend, fl, alt, list, vid, vlive, fill, tinto, free, nextId, pos, building,
          op, gc, mode, ack, gcSnap, crashOp, crashGc>>

(***************************************************************************)
(* Invariants                                                              *)
(***************************************************************************)
TypeOK ==
    /\ PM!PMTypeOK
    /\ mode \in {"run", "down"}
    /\ free \subseteq Chunks
    /\ ack \subseteq Extents

InFlight(o) == IF o # NoOp THEN {o.e} ELSE {}

\* The durable state is the replay of the list the persisted alt bit names:
\* it replays cleanly and, with nothing in flight, holds exactly the
\* acknowledged extents, as the volatile log does.
DurableIsReplayOfAltList ==
    /\ Replay(dur).ok
    /\ (Idle /\ PM!Quiescent) => (Replay(dur).ext = ack /\ {e \in Extents : pos[e] # NoPos} = ack)

\* GC never changes the live-extent set, at any crash point within it.
GcKeepsLiveExtents ==
    (mode = "down" /\ crashGc) => Replay(dur).ext = gcSnap

\* No chunk reachable from the list a crash would replay is free or being
\* initialised (so slow GC recycles the old list only after the flip is durable).
NoReuseOfReachableChunk ==
    mode = "run" => (free \cup building) \cap Reachable(dur) = {}

\* A tombstone only ever cancels the record incarnation it was written for.
NoStaleTombstoneCancels ==
    LET r == Replay(dur) IN
    \A t \in r.tombs : \A x \in r.recs : t.w.tgt = x.p => t.w.g = x.g

\* After a crash: allocated extents include every acknowledged one and
\* nothing beyond the one in flight.
RecoveredAllocations ==
    mode = "down" => (ack \subseteq Replay(dur).ext /\ Replay(dur).ext \subseteq ack \cup InFlight(crashOp))
=============================================================================
