----------------------- MODULE BookkeepingLogGCTrace -----------------------
(***************************************************************************)
(* Trace validation of BookkeepingLogGC (`pmsim specs validate`): the      *)
(* bookkeeping log of a run of pmsim's NVAlloc (NVAlloc-LOG), from the     *)
(* heap's creation on, mapped by specs/src/validate/bklog.rs. Chunk c of   *)
(* the spec is the code's chunk index c - 1 (the code's next and head      *)
(* pointers hold index + 1 already); an extent is named by its first page. *)
(*                                                                         *)
(* Steps: BeginAlloc / BeginFree (the append a large allocation or free    *)
(* makes, placed before its first write by the mapping, which reads the    *)
(* record it ends with); Write (the new value of every modelled line       *)
(* stored to before a fence: the log header, or a chunk's header and the   *)
(* slots that changed, and whether each was flushed whole) and Fence. As   *)
(* in SlabMorphingTrace, a Write is any spec action leaving exactly those  *)
(* values with exactly those lines flushed; a Fence is the spec's fence    *)
(* after a WriteFlush step, or nothing when nothing is left to make        *)
(* durable. A slow GC's chunks are the ones the step writes, in the order  *)
(* of their new ids (the order the code took them from its free stack).    *)
(*                                                                         *)
(* A long trace is checked in windows (specs/src/validate/bklog.rs), each  *)
(* from the state the trace gives the log at its start (InitFrom below).   *)
(***************************************************************************)
EXTENDS BookkeepingLogGC, TraceValidation, TraceData

VARIABLE i

tvars == <<vars, i>>

Expected ==
    CASE op # NoOp /\ op.st = "init_fence" -> "NewChunkFence"
      [] op # NoOp /\ op.st = "link" -> "NewChunkLink"
      [] op # NoOp /\ TailFull /\ op.st = "start" -> "NewChunk"
      [] op # NoOp -> "WriteEntry"
      [] gc.st = "head_fence" -> "SlowGcHeadFence"
      [] gc.st = "flip" -> "SlowGcFlip"
      [] OTHER -> "BeginAlloc, BeginFree, FastGcUnlink or SlowGcBuild"

NextExpected == IF i < Len(Trace) THEN Expected ELSE "nothing"

\* The value a chunk line's slot s holds after step e (its listed slots
\* changed, the others kept).
SlotAfter(e, l, s) ==
    IF \E x \in e.w[l].recs : x[1] = s THEN (CHOOSE x \in e.w[l].recs : x[1] = s)[2] ELSE vol[l].rec[s]

Leaves(e) ==
    /\ \A l \in Lines \ DOMAIN e.w : vol'[l] = vol[l]
    /\ \A l \in DOMAIN e.w :
          IF l = HdrL THEN vol'[l] = e.w[l]
          ELSE /\ vol'[l].id = e.w[l].id /\ vol'[l].next = e.w[l].next /\ vol'[l].active = e.w[l].active
               /\ \A s \in Slots : vol'[l].rec[s] = SlotAfter(e, l, s)
    /\ \A l \in DOMAIN e.w : (fl'[l] = Len(pend'[l])) <=> (l \in e.f)

\* The chunks a step writes, by the ids it gives them.
Written(e) == {l[2] : l \in DOMAIN e.w \ {HdrL}}
GcOrder(e) ==
    LET S == Written(e)
        RECURSIVE F(_)
        F(T) == IF T = {} THEN <<>>
                ELSE LET m == CHOOSE c \in T : \A d \in T : e.w[ChL(c)].id <= e.w[ChL(d)].id IN <<m>> \o F(T \ {m})
    IN F(S)

WriteStep(e) ==
    \/ /\ NewChunk \/ NewChunkLink \/ WriteEntry \/ FastGcUnlink \/ SlowGcFlip \/ SlowGcBuildOn(GcOrder(e))
       /\ Leaves(e)
    \/ /\ PM!Quiescent
       /\ \A l \in DOMAIN e.w : IF l = HdrL THEN e.w[l] = vol[l]
                                ELSE /\ e.w[l].id = vol[l].id /\ e.w[l].next = vol[l].next
                                     /\ e.w[l].active = vol[l].active
                                     /\ \A x \in e.w[l].recs : vol[l].rec[x[1]] = x[2]
       /\ UNCHANGED vars

FenceStep ==
    \/ NewChunkFence \/ SlowGcHeadFence
    \/ PM!Quiescent /\ UNCHANGED vars

Visible(e) ==
    CASE e.a = "BeginAlloc" -> BeginAlloc(e.e)
      [] e.a = "BeginFree" -> BeginFree(e.e)
      [] e.a = "Write" -> WriteStep(e)
      [] e.a = "Fence" -> FenceStep
      [] OTHER -> FALSE

\* A window starts from TraceData's StartHdr, StartChunks (chunk c's line
\* is StartChunks[c]) and StartNextId, where the log is quiet: nothing
\* queued, no append or GC in flight. There the volatile log is the one
\* recovery rebuilds from the image, but for the next chunk id, which counts
\* every id ever given (a slow GC with nothing live gives none back). Init
\* is InitFrom(InitImg, 1).
StartImg == [l \in Lines |-> IF l = HdrL THEN StartHdr ELSE StartChunks[l[2]]]

InitFrom(img, nid) ==
    LET v == RecoveredLog(img)
    IN /\ v.ok
       /\ PM!PMInit(img)
       /\ alt = v.alt
       /\ list = v.list
       /\ vid = v.vid
       /\ vlive = v.vlive
       /\ fill = v.fill
       /\ tinto = v.tinto
       /\ free = v.free
       /\ nextId = nid
       /\ pos = v.pos
       /\ building = {}
       /\ op = NoOp
       /\ gc = GcIdle
       /\ mode = "run"
       /\ ack = v.ext
       /\ gcSnap = {}
       /\ crashOp = NoOp
       /\ crashGc = FALSE

TraceInit == InitFrom(StartImg, StartNextId) /\ i = 0 /\ PrintT(<<"pmsim-reached", 0, NextExpected>>)

TraceNext ==
    /\ i < Len(Trace)
    /\ Visible(Trace[i + 1])
    /\ i' = i + 1
    /\ Reached(i', NextExpected')
=============================================================================
