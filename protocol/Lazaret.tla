------------------------------- MODULE Lazaret -------------------------------
(***************************************************************************)
(* Lifecycle and communication model of one Lazaret Domain.               *)
(*                                                                         *)
(* This module is normative for the Domain protocol. It describes what the *)
(* Session Coordinator (Host Coordinator + Runtime Supervisor + attached   *)
(* runsc), the Client CLIs, the untrusted Agent Sandbox and the developer  *)
(* may do, in which order, and what must always (or eventually) be true.   *)
(*                                                                         *)
(* Scope and abstractions                                                  *)
(*  - One Domain.  Every variable below is per Domain and no action reads  *)
(*    another Domain's state, so cross-Domain isolation holds by           *)
(*    construction; checking one Domain is enough.                         *)
(*  - A Domain generation is not numbered.  Only one generation is live at *)
(*    a time; the durable intent records and the prepared-lower lease      *)
(*    belong to "the current or last generation".  Component ids are      *)
(*    re-minted per generation and differ from the previous ones, which is *)
(*    what makes stale credentials recognisable.                           *)
(*  - Cryptography, the wire codec, runsc, FUSE, routes and slirp4netns    *)
(*    are refinement boundaries.  A credential is abstracted to "Signed"   *)
(*    (a valid sandbox-role certificate of this generation plus a Session  *)
(*    Anchor signature over the exact record under the claimed tuple's     *)
(*    anchor) or "Forged" (anything else: bad signature, another role's    *)
(*    certificate, a previous generation's certificate, oversize record).  *)
(*  - Failures never remove physical resources.  Only the ordered          *)
(*    dismantling steps do, and only for resources with a durable intent.  *)
(*  - A coordinator crash releases the flock (the kernel does that).  Its  *)
(*    host commands are coupled to it (parent-death signal) and recorded   *)
(*    durably (pid, start time, process group); the model lets them        *)
(*    survive the crash as `stray` (a descendant may outlive the signal)   *)
(*    and makes recovery kill exactly the recorded ones before the Domain  *)
(*    can be Absent or published again.  Everything else is left for the   *)
(*    next lock holder to recover.                                         *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets

CONSTANTS
    CLIs,           \* Client CLI processes; a CLI's id is the value itself
    Requests,       \* escalation correlation ids usable in one generation
    SessionIds,     \* pool the coordinator mints Session IDs from
    Anchors,        \* pool the coordinator mints Session Anchors from
    ComponentIds,   \* pool of runtime component ids (coordinator, sidecar, sandbox)
    Commands,       \* host commands the sandbox may ask for
    AutoRuleCmds,   \* commands matched exactly by a trusted auto-approval rule
    ShellCmds,      \* commands that need a shell to run
    AltConfigClis,  \* CLIs whose profile configuration differs (other fingerprint)
    MaxCrashes,     \* bound on coordinator crashes in one behaviour
    NoCli, NoSid, NoAnchor, NoId, NoCmd   \* "nothing" markers

ASSUME
    /\ IsFiniteSet(CLIs) /\ CLIs # {}
    /\ IsFiniteSet(Requests)
    /\ IsFiniteSet(SessionIds) /\ Cardinality(SessionIds) >= Cardinality(CLIs)
    /\ IsFiniteSet(Anchors) /\ Cardinality(Anchors) >= Cardinality(CLIs)
    /\ IsFiniteSet(ComponentIds) /\ Cardinality(ComponentIds) >= 6
    /\ AutoRuleCmds \subseteq Commands /\ ShellCmds \subseteq Commands
    /\ AltConfigClis \subseteq CLIs
    /\ MaxCrashes \in Nat
    /\ NoCli \notin CLIs /\ NoSid \notin SessionIds /\ NoAnchor \notin Anchors
    /\ NoId \notin ComponentIds /\ NoCmd \notin Commands
    /\ ComponentIds \cap CLIs = {}

-----------------------------------------------------------------------------
(* Vocabulary *)

Phases == {"Absent", "Starting", "Ready", "Stopping", "Failed", "Recovering"}

\* Phases in which transient resources are taken down in reverse order.
Dismantling == {"Stopping", "Recovering"}

\* Component roles that get a minted runtime id per generation.
Roles == {"coordinator", "sidecar", "sandbox"}

\* External resources whose creation is preceded by a durable intent record.
\*   supervisor: Runtime Supervisor process (owns the generation namespaces)
\*   mount     : State Anchor overlay over the prepared lower
\*   netns     : enforcement network namespace (derived policy lives in it)
\*   helper    : connectivity helper (slirp4netns), supervised by the RS
\*   sandbox   : attached runsc + Agent Sandbox
Res == {"supervisor", "mount", "netns", "helper", "sandbox"}

\* What each resource needs to exist first (startup order); dismantling goes
\* the other way round.
Needs(k) ==
    CASE k = "supervisor" -> {}
      [] k = "mount"      -> {"supervisor"}
      [] k = "netns"      -> {"mount"}
      [] k = "helper"     -> {"netns"}
      [] k = "sandbox"    -> {"helper"}

Dependents(k) == {d \in Res : k \in Needs(d)}

\* CLI-side states of a Client CLI process.
CliStates == {"Idle",       \* invoked: trying to join, or to win the lock
              "Spawning",   \* won the lock, its coordinator is bootstrapping
              "Connected",  \* connected to the published coordinator, said hello
              "Attached",   \* has a registered Client Session
              "Done"}       \* exited

Creds == {"Signed", "Forged"}
NoCred == "NoCred"

Approvals == {"None", "Auto", "Developer"}
Outcomes == {"Completed", "Denied", "TimedOut", "Expired", "Cancelled", "Failed"}

ReqPhases == {"Unused", "Rejected", "Accepted", "Prompting",
              "Executing", "Resolved", "Delivered", "Abandoned"}
AcceptedPhases == {"Accepted", "Prompting", "Executing", "Resolved"}
ClosedPhases == {"Rejected", "Delivered", "Abandoned"}

Tuple(c, s, a) == [cli |-> c, sid |-> s, anchor |-> a]
Tuples == [cli : CLIs, sid : SessionIds, anchor : Anchors]
NoTuple == Tuple(NoCli, NoSid, NoAnchor)
NoReg == [sid |-> NoSid, anchor |-> NoAnchor]

ConfigOf(c) == IF c \in AltConfigClis THEN "B" ELSE "A"
NoCfg == "none"

AutoEligible(cmd) == cmd \in AutoRuleCmds /\ cmd \notin ShellCmds

-----------------------------------------------------------------------------
VARIABLES
    \* --- Domain lifecycle and ownership ---
    phase,       \* Domain phase
    lock,        \* holder of the exclusive Domain flock (via the coordinator it spawned)
    hc,          \* set of CLIs whose spawned Host Coordinator is alive
    storeOwner,  \* process that has the durable store open
    crashes,     \* coordinator crashes so far (bounded by MaxCrashes)
    stray,       \* requests whose (recorded) host command outlived a crashed coordinator
    compIds,     \* [Roles -> id] minted for the current (or last) generation
    domainCfg,   \* configuration fingerprint of the current generation
    \* --- resources ---
    lease,       \* durable prepared-lower lease held by the generation
    artifact,    \* prepared lower on disk: "Absent" or "Ready"
    intent,      \* [Res -> BOOLEAN] durable intent records
    res,         \* [Res -> BOOLEAN] physical existence
    trust,       \* Trust Anchor of the generation is valid
    policy,      \* derived network policy installed in the enforcement netns
    netAttest,   \* Network Sidecar id under which readiness was attested, or NoId
    probed,      \* pre-publication reachability probe passed
    published,   \* the coordinator socket is at its published path
    \* --- sessions ---
    cli,         \* [CLIs -> CliStates]
    connected,   \* CLIs with a live connection, as the coordinator sees it
    reg,         \* [CLIs -> [sid, anchor]]  registered session identity or NoReg
    term,        \* [CLIs -> "None" | "Sandbox" | r]  who owns the session terminal
    held,        \* [CLIs -> BOOLEAN]  session output the coordinator holds back
    spoiled,     \* [CLIs -> BOOLEAN]  history: session output reached a terminal showing a prompt
    \* --- escalation ---
    reqPhase,    \* [Requests -> ReqPhases]
    reqClaim,    \* [Requests -> claimed (Client CLI ID, Session ID, Session Anchor)]
    reqCred,     \* [Requests -> Creds \cup {NoCred}]
    reqCmd,      \* [Requests -> requested command]
    approval,    \* [Requests -> Approvals]
    runCmd,      \* [Requests -> the command authorised to run]
    decidedBy,   \* [Requests -> CLI whose developer decided, or NoCli]
    outcome,     \* [Requests -> Outcomes \cup {"None"}]
    host         \* set of requests whose host command is running

lifeVars == <<phase, lock, hc, storeOwner, crashes, compIds, domainCfg, stray>>
resVars  == <<lease, artifact, intent, res, trust, policy, netAttest, probed, published>>
sessVars == <<cli, connected, reg, term>>
reqVars  == <<reqPhase, reqClaim, reqCred, reqCmd, approval, runCmd, decidedBy, outcome, host>>
outVars  == <<held, spoiled>>
vars == <<lifeVars, resVars, sessVars, reqVars, outVars>>

-----------------------------------------------------------------------------
(* Derived notions *)

Registered == {c \in CLIs : reg[c].sid # NoSid}
Owner(r) == reqClaim[r].cli
CoordinatorAlive == hc # {}
HcHoldsStore == CoordinatorAlive /\ storeOwner = lock /\ lock # NoCli
NoIntents == \A k \in Res : ~intent[k]
NetworkReady == netAttest # NoId /\ netAttest = compIds["sidecar"]
Orphaned == phase = "Failed" /\ ~CoordinatorAlive

\* A registered session's full identity tuple.
TupleOf(c) == Tuple(c, reg[c].sid, reg[c].anchor)

\* Session identities handed out so far in the live registry.
UsedSids == {reg[c].sid : c \in Registered}
UsedAnchors == {reg[c].anchor : c \in Registered}

\* Fresh runtime component ids for a new generation: one per role, distinct,
\* and disjoint from the ids of the previous generation.
FreshIds ==
    CHOOSE f \in [Roles -> ComponentIds] :
        /\ \A x, y \in Roles : x # y => f[x] # f[y]
        /\ \A x, y \in Roles : f[x] # compIds[y]

\* A request record passes the coordinator's checks: valid role-bound
\* credential and signature, and the claimed tuple is exactly the tuple of a
\* currently registered session.
Authentic(t, cred) ==
    /\ cred = "Signed"
    /\ phase = "Ready" /\ trust
    /\ t.cli \in Registered
    /\ t = TupleOf(t.cli)

-----------------------------------------------------------------------------
(* Reusable state updates *)

\* Wipe request r's record down to phase ph (keeps states small).
WipeRequest(r, ph) ==
    /\ reqPhase'  = [reqPhase  EXCEPT ![r] = ph]
    /\ reqClaim'  = [reqClaim  EXCEPT ![r] = NoTuple]
    /\ reqCred'   = [reqCred   EXCEPT ![r] = NoCred]
    /\ reqCmd'    = [reqCmd    EXCEPT ![r] = NoCmd]
    /\ approval'  = [approval  EXCEPT ![r] = "None"]
    /\ runCmd'    = [runCmd    EXCEPT ![r] = NoCmd]
    /\ decidedBy' = [decidedBy EXCEPT ![r] = NoCli]
    /\ outcome'   = [outcome   EXCEPT ![r] = "None"]

\* Request r gets its outcome o.  The record keeps only what the result
\* needs: its owner, the outcome, and the deciding session for a denial.
Resolve(r, o, decider) ==
    /\ reqPhase' = [reqPhase EXCEPT ![r] = "Resolved"]
    /\ outcome' = [outcome EXCEPT ![r] = o]
    /\ reqCmd' = [reqCmd EXCEPT ![r] = NoCmd]
    /\ runCmd' = [runCmd EXCEPT ![r] = NoCmd]
    /\ approval' = [approval EXCEPT ![r] = "None"]
    /\ decidedBy' = [decidedBy EXCEPT ![r] = IF o = "Denied" THEN decider ELSE NoCli]
    /\ UNCHANGED <<reqClaim, reqCred>>

\* Sessions of the CLIs in S are gone: their accepted requests are abandoned
\* (no result is owed to a disconnected session) and their host commands are
\* killed in the same step.
AbandonRequests(S) ==
    LET hit(r) == reqPhase[r] \in AcceptedPhases /\ Owner(r) \in S IN
    /\ reqPhase'  = [r \in Requests |-> IF hit(r) THEN "Abandoned" ELSE reqPhase[r]]
    /\ reqClaim'  = [r \in Requests |-> IF hit(r) THEN NoTuple ELSE reqClaim[r]]
    /\ reqCred'   = [r \in Requests |-> IF hit(r) THEN NoCred ELSE reqCred[r]]
    /\ reqCmd'    = [r \in Requests |-> IF hit(r) THEN NoCmd ELSE reqCmd[r]]
    /\ approval'  = [r \in Requests |-> IF hit(r) THEN "None" ELSE approval[r]]
    /\ runCmd'    = [r \in Requests |-> IF hit(r) THEN NoCmd ELSE runCmd[r]]
    /\ decidedBy' = [r \in Requests |-> IF hit(r) THEN NoCli ELSE decidedBy[r]]
    /\ outcome'   = [r \in Requests |-> IF hit(r) THEN "None" ELSE outcome[r]]
    /\ host' = {r \in host : ~hit(r)}

\* The generation stops taking requests (teardown, stop, failure, crash):
\* every host command is killed and every slot ends -- accepted requests
\* are abandoned with their sessions, and nothing more can be submitted
\* until the next generation makes a fresh mailbox.
CloseMailbox ==
    /\ reqPhase'  = [r \in Requests |-> "Abandoned"]
    /\ reqClaim'  = [r \in Requests |-> NoTuple]
    /\ reqCred'   = [r \in Requests |-> NoCred]
    /\ reqCmd'    = [r \in Requests |-> NoCmd]
    /\ approval'  = [r \in Requests |-> "None"]
    /\ runCmd'    = [r \in Requests |-> NoCmd]
    /\ decidedBy' = [r \in Requests |-> NoCli]
    /\ outcome'   = [r \in Requests |-> "None"]
    /\ host' = {}

\* Every session is closed by the coordinator (stop, failure, crash): clients
\* are told and exit; a CLI still waiting for its coordinator's startup report
\* goes to spawnTo.
CloseAllSessions(spawnTo) ==
    /\ cli' = [c \in CLIs |->
                 CASE cli[c] \in {"Connected", "Attached"} -> "Done"
                   [] cli[c] = "Spawning" -> spawnTo
                   [] OTHER -> cli[c]]
    /\ connected' = {}
    /\ reg' = [c \in CLIs |-> NoReg]
    /\ term' = [c \in CLIs |-> "None"]

-----------------------------------------------------------------------------
(* Initial state: nothing runs, nothing is recorded. *)

Init ==
    /\ phase = "Absent"
    /\ lock = NoCli
    /\ hc = {}
    /\ storeOwner = NoCli
    /\ crashes = 0
    /\ stray = {}
    /\ compIds = [x \in Roles |-> NoId]
    /\ domainCfg = NoCfg
    /\ lease = FALSE
    /\ artifact = "Absent"
    /\ intent = [k \in Res |-> FALSE]
    /\ res = [k \in Res |-> FALSE]
    /\ trust = FALSE
    /\ policy = FALSE
    /\ netAttest = NoId
    /\ probed = FALSE
    /\ published = FALSE
    /\ cli = [c \in CLIs |-> "Idle"]
    /\ connected = {}
    /\ reg = [c \in CLIs |-> NoReg]
    /\ term = [c \in CLIs |-> "None"]
    /\ held = [c \in CLIs |-> FALSE]
    /\ spoiled = [c \in CLIs |-> FALSE]
    /\ reqPhase = [r \in Requests |-> "Unused"]
    /\ reqClaim = [r \in Requests |-> NoTuple]
    /\ reqCred = [r \in Requests |-> NoCred]
    /\ reqCmd = [r \in Requests |-> NoCmd]
    /\ approval = [r \in Requests |-> "None"]
    /\ runCmd = [r \in Requests |-> NoCmd]
    /\ decidedBy = [r \in Requests |-> NoCli]
    /\ outcome = [r \in Requests |-> "None"]
    /\ host = {}

-----------------------------------------------------------------------------
(***************************************************************************)
(* Client CLI actions                                                      *)
(***************************************************************************)

\* Win the non-blocking exclusive Domain lock and spawn a coordinator.  Only
\* possible when nothing is published and nobody holds the lock.  A Domain
\* left Failed by a crashed coordinator is adopted: the new coordinator
\* recovers before anything can start.
TakeLock(c) ==
    /\ cli[c] = "Idle"
    /\ lock = NoCli
    /\ ~published
    /\ phase \in {"Absent", "Failed"}
    /\ lock' = c
    /\ hc' = hc \cup {c}
    /\ cli' = [cli EXCEPT ![c] = "Spawning"]
    /\ phase' = IF phase = "Absent" THEN "Starting" ELSE "Recovering"
    /\ UNCHANGED <<storeOwner, crashes, compIds, domainCfg, stray>>
    /\ UNCHANGED resVars
    /\ UNCHANGED <<connected, reg, term>>
    /\ UNCHANGED reqVars

\* Connect to the published coordinator; hello carries the configuration
\* fingerprint, which must equal the running generation's.
Join(c) ==
    /\ cli[c] = "Idle"
    /\ published
    /\ ConfigOf(c) = domainCfg
    /\ cli' = [cli EXCEPT ![c] = "Connected"]
    /\ connected' = connected \cup {c}
    /\ UNCHANGED lifeVars
    /\ UNCHANGED resVars
    /\ UNCHANGED <<reg, term>>
    /\ UNCHANGED reqVars

\* A changed profile is refused with a diagnostic; the CLI exits.
JoinRefused(c) ==
    /\ cli[c] = "Idle"
    /\ published
    /\ ConfigOf(c) # domainCfg
    /\ cli' = [cli EXCEPT ![c] = "Done"]
    /\ UNCHANGED lifeVars
    /\ UNCHANGED resVars
    /\ UNCHANGED <<connected, reg, term>>
    /\ UNCHANGED reqVars

\* A loser of the lock race whose Domain is never published fails closed.
GiveUp(c) ==
    /\ cli[c] = "Idle"
    /\ lock # NoCli
    /\ ~published
    /\ cli' = [cli EXCEPT ![c] = "Done"]
    /\ UNCHANGED lifeVars
    /\ UNCHANGED resVars
    /\ UNCHANGED <<connected, reg, term>>
    /\ UNCHANGED reqVars

\* The session ends (command exit, client exit, connection loss).  The
\* coordinator deregisters first, then kills the session's host commands,
\* abandons its requests and releases its terminal -- atomically here.
Leave(c) ==
    /\ cli[c] \in {"Connected", "Attached"}
    /\ cli' = [cli EXCEPT ![c] = "Done"]
    /\ connected' = connected \ {c}
    /\ reg' = [reg EXCEPT ![c] = NoReg]
    /\ term' = [term EXCEPT ![c] = "None"]
    /\ AbandonRequests({c})
    /\ UNCHANGED lifeVars
    /\ UNCHANGED resVars

\* The developer runs `lazaret` again in a terminal.
Reinvoke(c) ==
    /\ cli[c] = "Done"
    /\ cli' = [cli EXCEPT ![c] = "Idle"]
    /\ UNCHANGED lifeVars
    /\ UNCHANGED resVars
    /\ UNCHANGED <<connected, reg, term>>
    /\ UNCHANGED reqVars

\* The same, restricted to a Domain orphaned by a coordinator crash.  This is
\* the environment assumption that daemonless recovery rests on: a Domain is
\* only recovered when some `lazaret` for it runs again.
Revisit(c) == Orphaned /\ Reinvoke(c)

-----------------------------------------------------------------------------
(***************************************************************************)
(* Coordinator: bootstrap in order                                        *)
(*   lock -> store -> generation + ids -> lower lease -> prepared lower   *)
(*   -> supervisor -> State Anchor -> Trust Anchor -> netns -> helper     *)
(*   -> policy -> readiness attestation -> sandbox -> probe -> publish    *)
(***************************************************************************)

\* Only the lock holder's coordinator opens the durable store.
OpenStore ==
    /\ phase \in {"Starting", "Recovering"}
    /\ CoordinatorAlive
    /\ lock \in hc
    /\ storeOwner = NoCli
    /\ storeOwner' = lock
    /\ UNCHANGED <<phase, lock, hc, crashes, compIds, domainCfg, stray>>
    /\ UNCHANGED resVars
    /\ UNCHANGED sessVars
    /\ UNCHANGED reqVars

\* Durable generation identity, configuration fingerprint, fresh component
\* ids, and a fresh escalation mailbox.
MintGeneration ==
    /\ phase = "Starting"
    /\ HcHoldsStore
    /\ domainCfg = NoCfg
    /\ domainCfg' = ConfigOf(lock)
    /\ compIds' = FreshIds
    /\ UNCHANGED <<phase, lock, hc, storeOwner, crashes, stray>>
    /\ UNCHANGED resVars
    /\ UNCHANGED sessVars
    /\ UNCHANGED reqVars

\* The lease is recorded before the lower is prepared or used.
LeaseLower ==
    /\ phase = "Starting"
    /\ HcHoldsStore
    /\ domainCfg # NoCfg
    /\ ~lease
    /\ lease' = TRUE
    /\ UNCHANGED lifeVars
    /\ UNCHANGED <<artifact, intent, res, trust, policy, netAttest, probed, published>>
    /\ UNCHANGED sessVars
    /\ UNCHANGED reqVars

\* OCI-aware preparation; a finished artifact is reused.
PrepareLower ==
    /\ phase = "Starting"
    /\ HcHoldsStore
    /\ lease
    /\ artifact = "Absent"
    /\ artifact' = "Ready"
    /\ UNCHANGED lifeVars
    /\ UNCHANGED <<lease, intent, res, trust, policy, netAttest, probed, published>>
    /\ UNCHANGED sessVars
    /\ UNCHANGED reqVars

\* What must hold before resource k may be intended or created.
Prerequisite(k) ==
    /\ \A n \in Needs(k) : res[n]
    /\ CASE k = "supervisor" -> lease /\ artifact = "Ready"
         [] k = "mount"      -> TRUE
         [] k = "netns"      -> trust
         [] k = "helper"     -> TRUE
         [] k = "sandbox"    -> NetworkReady

\* Record the durable intent for k (one store transaction).
Intend(k) ==
    /\ phase = "Starting"
    /\ HcHoldsStore
    /\ ~intent[k]
    /\ Prerequisite(k)
    /\ intent' = [intent EXCEPT ![k] = TRUE]
    /\ UNCHANGED lifeVars
    /\ UNCHANGED <<lease, artifact, res, trust, policy, netAttest, probed, published>>
    /\ UNCHANGED sessVars
    /\ UNCHANGED reqVars

\* Create k; its ownership material (pid + start time, mount id) is then
\* completed in the intent record.
Create(k) ==
    /\ phase = "Starting"
    /\ HcHoldsStore
    /\ intent[k]
    /\ ~res[k]
    /\ Prerequisite(k)
    /\ res' = [res EXCEPT ![k] = TRUE]
    /\ UNCHANGED lifeVars
    /\ UNCHANGED <<lease, artifact, intent, trust, policy, netAttest, probed, published>>
    /\ UNCHANGED sessVars
    /\ UNCHANGED reqVars

\* Ephemeral per-generation certificate authority.
CreateTrustAnchor ==
    /\ phase = "Starting"
    /\ HcHoldsStore
    /\ res["mount"]
    /\ ~trust
    /\ trust' = TRUE
    /\ UNCHANGED lifeVars
    /\ UNCHANGED <<lease, artifact, intent, res, policy, netAttest, probed, published>>
    /\ UNCHANGED sessVars
    /\ UNCHANGED reqVars

\* The RS installs only the policy derived from trusted configuration.
InstallPolicy ==
    /\ phase = "Starting"
    /\ HcHoldsStore
    /\ res["netns"] /\ res["helper"]
    /\ ~policy
    /\ policy' = TRUE
    /\ UNCHANGED lifeVars
    /\ UNCHANGED <<lease, artifact, intent, res, trust, netAttest, probed, published>>
    /\ UNCHANGED sessVars
    /\ UNCHANGED reqVars

\* Readiness attested from observed routes and helper state, bound to the
\* Network Sidecar role id of this generation (the readiness fingerprint).
AttestNetwork ==
    /\ phase = "Starting"
    /\ HcHoldsStore
    /\ res["netns"] /\ res["helper"] /\ policy
    /\ netAttest = NoId
    /\ netAttest' = compIds["sidecar"]
    /\ UNCHANGED lifeVars
    /\ UNCHANGED <<lease, artifact, intent, res, trust, policy, probed, published>>
    /\ UNCHANGED sessVars
    /\ UNCHANGED reqVars

\* Reachability probe from the sandbox's network view (a failing probe is a
\* FailDomain step).
ProbeNetwork ==
    /\ phase = "Starting"
    /\ HcHoldsStore
    /\ res["sandbox"] /\ NetworkReady
    /\ ~probed
    /\ probed' = TRUE
    /\ UNCHANGED lifeVars
    /\ UNCHANGED <<lease, artifact, intent, res, trust, policy, netAttest, published>>
    /\ UNCHANGED sessVars
    /\ UNCHANGED reqVars

\* Publication: the socket appears at its published path only now.  The
\* spawning CLI receives "ready" and goes back to joining like anyone else.
Publish ==
    /\ phase = "Starting"
    /\ HcHoldsStore
    /\ res["sandbox"] /\ probed /\ trust /\ NetworkReady
    /\ ~published
    /\ phase' = "Ready"
    /\ published' = TRUE
    /\ cli' = [c \in CLIs |-> IF cli[c] = "Spawning" THEN "Idle" ELSE cli[c]]
    /\ UNCHANGED <<lock, hc, storeOwner, crashes, compIds, domainCfg, stray>>
    /\ UNCHANGED <<lease, artifact, intent, res, trust, policy, netAttest, probed>>
    /\ UNCHANGED <<connected, reg, term>>
    /\ UNCHANGED reqVars

-----------------------------------------------------------------------------
(***************************************************************************)
(* Coordinator: sessions                                                   *)
(***************************************************************************)

\* Registration binds (Client CLI ID, Session ID, Session Anchor); the ids
\* are fresh among live sessions.  The session gets its PTY: the terminal
\* belongs to the sandbox session.
Register(c) ==
    /\ cli[c] = "Connected"
    /\ c \in connected
    /\ phase = "Ready"
    /\ CoordinatorAlive
    /\ reg' = [reg EXCEPT ![c] =
                 [sid |-> CHOOSE s \in SessionIds : s \notin UsedSids,
                  anchor |-> CHOOSE a \in Anchors : a \notin UsedAnchors]]
    /\ cli' = [cli EXCEPT ![c] = "Attached"]
    /\ term' = [term EXCEPT ![c] = "Sandbox"]
    /\ UNCHANGED connected
    /\ UNCHANGED lifeVars
    /\ UNCHANGED resVars
    /\ UNCHANGED reqVars

-----------------------------------------------------------------------------
(***************************************************************************)
(* Coordinator: teardown and recovery                                      *)
(***************************************************************************)

\* Last session out: withdraw publication first, invalidate trust material.
\* A client that connected but has not registered is told to retry.
BeginTeardown ==
    /\ phase = "Ready"
    /\ CoordinatorAlive
    /\ Registered = {}
    /\ phase' = "Stopping"
    /\ published' = FALSE
    /\ trust' = FALSE
    /\ cli' = [c \in CLIs |-> IF cli[c] = "Connected" THEN "Idle" ELSE cli[c]]
    /\ connected' = {}
    /\ CloseMailbox
    /\ UNCHANGED <<lock, hc, storeOwner, crashes, compIds, domainCfg, stray>>
    /\ UNCHANGED <<lease, artifact, intent, res, policy, netAttest, probed>>
    /\ UNCHANGED <<reg, term>>

\* `lazaret stop`: same, but live sessions are closed with a reason.
StopCommand ==
    /\ phase = "Ready"
    /\ CoordinatorAlive
    /\ phase' = "Stopping"
    /\ published' = FALSE
    /\ trust' = FALSE
    /\ CloseAllSessions("Done")
    /\ CloseMailbox
    /\ UNCHANGED <<lock, hc, storeOwner, crashes, compIds, domainCfg, stray>>
    /\ UNCHANGED <<lease, artifact, intent, res, policy, netAttest, probed>>

\* A failing coordinator that is still alive starts recovering.
BeginRecovery ==
    /\ phase = "Failed"
    /\ CoordinatorAlive
    /\ phase' = "Recovering"
    /\ UNCHANGED <<lock, hc, storeOwner, crashes, compIds, domainCfg, stray>>
    /\ UNCHANGED resVars
    /\ UNCHANGED sessVars
    /\ UNCHANGED reqVars

\* Take down resource k (also when only its intent exists): allowed only once
\* everything that needs k is gone, so the order is sandbox, then network
\* (helper, netns), then State Anchor, then supervisor.  Only resources with a
\* durable intent are touched.
Dismantle(k) ==
    /\ phase \in Dismantling
    /\ HcHoldsStore
    /\ intent[k]
    /\ \A d \in Dependents(k) : ~intent[d]
    /\ res' = [res EXCEPT ![k] = FALSE]
    /\ intent' = [intent EXCEPT ![k] = FALSE]
    /\ probed' = IF k = "sandbox" THEN FALSE ELSE probed
    /\ netAttest' = IF k \in {"helper", "netns"} THEN NoId ELSE netAttest
    /\ policy' = IF k = "netns" THEN FALSE ELSE policy
    /\ UNCHANGED lifeVars
    /\ UNCHANGED <<lease, artifact, trust, published>>
    /\ UNCHANGED sessVars
    /\ UNCHANGED reqVars

\* The lease goes only after the State Anchor is unmounted.
ReleaseLease ==
    /\ phase \in Dismantling
    /\ HcHoldsStore
    /\ NoIntents
    /\ lease
    /\ lease' = FALSE
    /\ UNCHANGED lifeVars
    /\ UNCHANGED <<artifact, intent, res, trust, policy, netAttest, probed, published>>
    /\ UNCHANGED sessVars
    /\ UNCHANGED reqVars

\* Back to Absent: store closed, lock released, coordinator exits; a fresh
\* mailbox will be made by the next generation.  A CLI that adopted a failed
\* Domain retries from the start.
FinishDismantle ==
    /\ phase \in Dismantling
    /\ HcHoldsStore
    /\ NoIntents
    /\ ~lease
    /\ ~policy /\ netAttest = NoId /\ ~probed
    /\ stray = {}
    /\ phase' = "Absent"
    /\ lock' = NoCli
    /\ hc' = {}
    /\ storeOwner' = NoCli
    /\ domainCfg' = NoCfg
    /\ cli' = [c \in CLIs |-> IF cli[c] = "Spawning" THEN "Idle" ELSE cli[c]]
    /\ reqPhase' = [r \in Requests |-> "Unused"]
    /\ reqClaim' = [r \in Requests |-> NoTuple]
    /\ reqCred' = [r \in Requests |-> NoCred]
    /\ reqCmd' = [r \in Requests |-> NoCmd]
    /\ approval' = [r \in Requests |-> "None"]
    /\ runCmd' = [r \in Requests |-> NoCmd]
    /\ decidedBy' = [r \in Requests |-> NoCli]
    /\ outcome' = [r \in Requests |-> "None"]
    /\ UNCHANGED <<crashes, compIds, stray>>
    /\ UNCHANGED resVars
    /\ UNCHANGED <<connected, reg, term>>
    /\ UNCHANGED host

-----------------------------------------------------------------------------
(***************************************************************************)
(* Escalation                                                              *)
(***************************************************************************)

\* The untrusted sandbox writes a request record into the mailbox by atomic
\* rename, and the coordinator handles it when it reads it:
\*  - not authentic: rejected with a logged reason, without blocking the
\*    mailbox;
\*  - authentic and an exact auto-rule match that needs no shell: approved
\*    as the argv it is and started on the host (as argv, no shell);
\*  - authentic otherwise: accepted, bound to the session whose tuple it
\*    carries, waiting for that session's terminal.
\* The record may claim any identity tuple; the sandbox can sign only with
\* an anchor it holds.  (Reading, verifying and routing one record is one
\* step; the queue of unread records is not modelled.)
Submit(r, t, cmd) ==
    /\ reqPhase[r] = "Unused"
    /\ phase = "Ready"
    /\ res["sandbox"]
    /\ CoordinatorAlive
    /\ IF Authentic(t, "Signed")
         THEN /\ reqClaim' = [reqClaim EXCEPT ![r] = t]
              /\ reqCred' = [reqCred EXCEPT ![r] = "Signed"]
              /\ reqCmd' = [reqCmd EXCEPT ![r] = cmd]
              /\ UNCHANGED <<decidedBy, outcome>>
              /\ IF AutoEligible(cmd)
                   THEN /\ reqPhase' = [reqPhase EXCEPT ![r] = "Executing"]
                        /\ approval' = [approval EXCEPT ![r] = "Auto"]
                        /\ runCmd' = [runCmd EXCEPT ![r] = cmd]
                        /\ host' = host \cup {r}
                   ELSE /\ reqPhase' = [reqPhase EXCEPT ![r] = "Accepted"]
                        /\ UNCHANGED <<approval, runCmd, host>>
         ELSE /\ WipeRequest(r, "Rejected")
              /\ UNCHANGED host
    /\ UNCHANGED lifeVars
    /\ UNCHANGED resVars
    /\ UNCHANGED sessVars

\* A record with a bad signature, a certificate for another role or Domain,
\* a previous generation's certificate, a replayed id, or oversize content:
\* never authentic, always rejected.
SubmitForged(r) ==
    /\ reqPhase[r] = "Unused"
    /\ phase = "Ready"
    /\ res["sandbox"]
    /\ CoordinatorAlive
    /\ ~Authentic(NoTuple, "Forged")
    /\ WipeRequest(r, "Rejected")
    /\ UNCHANGED host
    /\ UNCHANGED lifeVars
    /\ UNCHANGED resVars
    /\ UNCHANGED sessVars

\* Routing: an accepted request is prompted on the owning session's
\* terminal, one prompt at a time per session (others wait as Accepted).
\* The terminal becomes the broker's: what the coordinator held back of the
\* session's output (and what waits in its streams) goes out before the
\* prompt frame is drawn.
Route(r) ==
    LET c == Owner(r) IN
    /\ reqPhase[r] = "Accepted"
    /\ CoordinatorAlive
    /\ phase = "Ready"
    /\ term[c] = "Sandbox"
    /\ reqPhase' = [reqPhase EXCEPT ![r] = "Prompting"]
    /\ term' = [term EXCEPT ![c] = r]
    /\ held' = [held EXCEPT ![c] = FALSE]
    /\ UNCHANGED spoiled
    /\ UNCHANGED <<reqClaim, reqCred, reqCmd, approval, runCmd, decidedBy, outcome, host>>
    /\ UNCHANGED lifeVars
    /\ UNCHANGED resVars
    /\ UNCHANGED <<cli, connected, reg>>

\* The developer answers at the terminal showing the prompt.  The answer is
\* authenticated as that session's (CLI id, Session ID, Session Anchor) over
\* the request id, the decision and the exact command.  The terminal goes
\* back to the sandbox session.  An approved (or edited, then approved)
\* command starts on the host at once; the developer saw it, so it may use
\* a shell.
Decide(c, r, verdict, cmd) ==
    /\ term[c] = r
    /\ c \in Registered
    /\ reqPhase[r] = "Prompting"
    /\ CoordinatorAlive
    /\ term' = [term EXCEPT ![c] = "Sandbox"]
    /\ IF verdict = "Deny"
         THEN /\ Resolve(r, "Denied", c)
              /\ UNCHANGED host
         ELSE /\ reqPhase' = [reqPhase EXCEPT ![r] = "Executing"]
              /\ approval' = [approval EXCEPT ![r] = "Developer"]
              /\ runCmd' = [runCmd EXCEPT ![r] = cmd]
              /\ decidedBy' = [decidedBy EXCEPT ![r] = c]
              /\ host' = host \cup {r}
              /\ UNCHANGED <<reqClaim, reqCred, reqCmd, outcome>>
    /\ UNCHANGED lifeVars
    /\ UNCHANGED resVars
    /\ UNCHANGED <<cli, connected, reg>>

Approve(c, r) == Decide(c, r, "Approve", reqCmd[r])
Edit(c, r, e) == e # reqCmd[r] /\ Decide(c, r, "Edit", e)
Deny(c, r) == Decide(c, r, "Deny", NoCmd)

\* The host command ends by itself (exit status + output), or could not run.
HostExit(r, o) ==
    /\ reqPhase[r] = "Executing"
    /\ o \in {"Completed", "Failed"}
    /\ Resolve(r, o, NoCli)
    /\ host' = host \ {r}
    /\ UNCHANGED lifeVars
    /\ UNCHANGED resVars
    /\ UNCHANGED sessVars

\* Deadline (coordinator) or cancellation (escalation client gone): kill the
\* host command if any, restore the terminal if the prompt is showing.
EndEarly(r, o) ==
    LET c == Owner(r) IN
    /\ reqPhase[r] \in {"Accepted", "Prompting", "Executing"}
    /\ CoordinatorAlive
    /\ Resolve(r, o, NoCli)
    /\ host' = host \ {r}
    /\ term' = IF term[c] = r THEN [term EXCEPT ![c] = "Sandbox"] ELSE term
    /\ UNCHANGED lifeVars
    /\ UNCHANGED resVars
    /\ UNCHANGED <<cli, connected, reg>>

\* The coordinator's deadline: a request still waiting for a decision
\* (Accepted or Prompting) expires after prompt_timeout_s without anything
\* running; a running host command is killed at its own timeout.
Expire(r) == EndEarly(r, IF reqPhase[r] = "Executing" THEN "TimedOut" ELSE "Expired")
Cancel(r) == EndEarly(r, "Cancelled")

\* The correlated result record is written to the mailbox for the session
\* that asked, by atomic rename.
Deliver(r) ==
    /\ reqPhase[r] = "Resolved"
    /\ Owner(r) \in Registered
    /\ CoordinatorAlive
    /\ WipeRequest(r, "Delivered")
    /\ UNCHANGED host
    /\ UNCHANGED lifeVars
    /\ UNCHANGED resVars
    /\ UNCHANGED sessVars

-----------------------------------------------------------------------------
(***************************************************************************)
(* Environment: failures, crashes, garbage collection                      *)
(***************************************************************************)

\* Something the coordinator depends on broke (sandbox died, probe failed,
\* helper died, a startup step failed).  Publication is withdrawn, trust
\* material invalidated, sessions disconnected, host commands killed.
\* Physical resources are NOT assumed gone.
FailDomain ==
    /\ phase \in {"Starting", "Ready", "Stopping"}
    /\ CoordinatorAlive
    /\ phase' = "Failed"
    /\ published' = FALSE
    /\ trust' = FALSE
    /\ CloseAllSessions("Done")
    /\ CloseMailbox
    /\ UNCHANGED <<lock, hc, storeOwner, crashes, compIds, domainCfg, stray>>
    /\ UNCHANGED <<lease, artifact, intent, res, policy, netAttest, probed>>

\* The Host Coordinator process dies.  The kernel releases the flock and the
\* socket stops answering.  Its running host commands may outlive it (a
\* descendant escapes the parent-death signal): they become `stray`, each
\* with its durable record.  Every other resource stays as it was,
\* recorded by its intent.
CrashCoordinator ==
    /\ CoordinatorAlive
    /\ crashes < MaxCrashes
    /\ crashes' = crashes + 1
    /\ stray' = host
    /\ phase' = "Failed"
    /\ hc' = {}
    /\ lock' = NoCli
    /\ storeOwner' = NoCli
    /\ published' = FALSE
    /\ trust' = FALSE
    /\ CloseAllSessions("Done")
    /\ CloseMailbox
    /\ UNCHANGED <<compIds, domainCfg>>
    /\ UNCHANGED <<lease, artifact, intent, res, policy, netAttest, probed>>

\* Parent-death coupling: a stray host command dies by itself.  Not fair.
ParentDeath(r) ==
    /\ r \in stray
    /\ stray' = stray \ {r}
    /\ UNCHANGED <<phase, lock, hc, storeOwner, crashes, compIds, domainCfg>>
    /\ UNCHANGED resVars
    /\ UNCHANGED sessVars
    /\ UNCHANGED reqVars

\* Recovery kills exactly the host commands its durable records name
\* (pid verified by start time, then the process group), before any other
\* recovery step completes the Domain.
KillRecordedHostCommands ==
    /\ phase = "Recovering"
    /\ HcHoldsStore
    /\ stray # {}
    /\ stray' = {}
    /\ UNCHANGED <<phase, lock, hc, storeOwner, crashes, compIds, domainCfg>>
    /\ UNCHANGED resVars
    /\ UNCHANGED sessVars
    /\ UNCHANGED reqVars

\* Garbage collection of a prepared lower no lease protects.
ReclaimLower ==
    /\ artifact = "Ready"
    /\ ~lease
    /\ artifact' = "Absent"
    /\ UNCHANGED lifeVars
    /\ UNCHANGED <<lease, intent, res, trust, policy, netAttest, probed, published>>
    /\ UNCHANGED sessVars
    /\ UNCHANGED reqVars

-----------------------------------------------------------------------------
(* Next-state relation and fairness *)

\* Steps the Session Coordinator takes by itself to start, stop or recover,
\* and its handling of a client's Open.
CoordinatorStep ==
    \/ OpenStore \/ MintGeneration \/ LeaseLower \/ PrepareLower
    \/ \E k \in Res : Intend(k) \/ Create(k)
    \/ CreateTrustAnchor \/ InstallPolicy \/ AttestNetwork
    \/ ProbeNetwork \/ Publish
    \/ BeginTeardown \/ BeginRecovery
    \/ \E k \in Res : Dismantle(k)
    \/ ReleaseLease \/ FinishDismantle \/ KillRecordedHostCommands
    \/ \E c \in CLIs : Register(c)

\* The sandbox session writes to its terminal.  The coordinator reads a
\* session's streams only while its terminal is the session's (never while
\* a prompt is up); a trailing piece in runsc's error shape is held back.
\* (Output written straight through changes nothing modelled here.)
SessionOutput(c) ==
    /\ c \in Registered
    /\ CoordinatorAlive
    /\ term[c] = "Sandbox"
    /\ ~held[c]
    /\ held' = [held EXCEPT ![c] = TRUE]
    /\ UNCHANGED spoiled
    /\ UNCHANGED <<lifeVars, resVars, sessVars, reqVars>>

\* The held piece is released (more output showed it was the command's, or
\* HELD_MAX_AGE passed).  Never while the session's terminal shows a
\* prompt: `spoiled` records it if that ever happened.
ReleaseHeld(c) ==
    /\ held[c]
    /\ CoordinatorAlive
    /\ term[c] \notin Requests
    /\ held' = [held EXCEPT ![c] = FALSE]
    /\ spoiled' = [spoiled EXCEPT ![c] = spoiled[c] \/ term[c] \in Requests]
    /\ UNCHANGED <<lifeVars, resVars, sessVars, reqVars>>

\* What the coordinator does for accepted requests by itself: prompt,
\* enforce deadlines, deliver results.
CoordinatorEscalationStep ==
    \E r \in Requests : Route(r) \/ ((Expire(r) \/ Deliver(r)) /\ UNCHANGED outVars)

ClientStep(c) ==
    \/ TakeLock(c) \/ Join(c) \/ JoinRefused(c) \/ GiveUp(c)
    \/ Leave(c) \/ Reinvoke(c)

\* The sandbox's, the developer's and the host command's own moves.
EscalationStep(r) ==
    \/ \E t \in Tuples, cmd \in Commands : Submit(r, t, cmd)
    \/ SubmitForged(r)
    \/ \E c \in CLIs :
          \/ Approve(c, r) \/ Deny(c, r)
          \/ \E e \in Commands : Edit(c, r, e)
    \/ \E o \in {"Completed", "Failed"} : HostExit(r, o)
    \/ Cancel(r)

EnvironmentStep ==
    \/ StopCommand \/ FailDomain \/ CrashCoordinator \/ ReclaimLower
    \/ \E r \in Requests : ParentDeath(r)

Next ==
    \/ CoordinatorStep /\ UNCHANGED outVars
    \/ CoordinatorEscalationStep
    \/ \E c \in CLIs : ClientStep(c) /\ UNCHANGED outVars
    \/ \E r \in Requests : EscalationStep(r) /\ UNCHANGED outVars
    \/ EnvironmentStep /\ UNCHANGED outVars
    \/ \E c \in CLIs : SessionOutput(c) \/ ReleaseHeld(c)

\* Fair: the coordinator's event loop eventually serves whatever it can
\* (lifecycle, registration, routing, execution, deadlines, delivery); a
\* CLI eventually tries the lock; the developer eventually runs lazaret
\* again for a Domain orphaned by a crash.  Not fair: the developer's
\* decisions, host commands ending by themselves, the sandbox, failures,
\* crashes, clients leaving or coming back otherwise.
\* The groups are weaker than one condition per action (a group may starve
\* one member while serving another); they are enough for the properties
\* below, which TLC checks under exactly this fairness.
Fairness ==
    /\ WF_vars(CoordinatorStep)
    /\ WF_vars(CoordinatorEscalationStep)
    /\ WF_vars(\E c \in CLIs : TakeLock(c) \/ Revisit(c))

Spec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
(***************************************************************************)
(* Safety invariants                                                       *)
(***************************************************************************)

TypeOK ==
    /\ phase \in Phases
    /\ lock \in CLIs \cup {NoCli}
    /\ hc \subseteq CLIs
    /\ storeOwner \in CLIs \cup {NoCli}
    /\ crashes \in 0..MaxCrashes
    /\ stray \subseteq Requests
    /\ compIds \in [Roles -> ComponentIds \cup {NoId}]
    /\ domainCfg \in {"A", "B", NoCfg}
    /\ lease \in BOOLEAN
    /\ artifact \in {"Absent", "Ready"}
    /\ intent \in [Res -> BOOLEAN]
    /\ res \in [Res -> BOOLEAN]
    /\ trust \in BOOLEAN /\ policy \in BOOLEAN /\ probed \in BOOLEAN
    /\ netAttest \in ComponentIds \cup {NoId}
    /\ published \in BOOLEAN
    /\ cli \in [CLIs -> CliStates]
    /\ connected \subseteq CLIs
    /\ reg \in [CLIs -> [sid : SessionIds \cup {NoSid}, anchor : Anchors \cup {NoAnchor}]]
    /\ \A c \in CLIs : (reg[c].sid = NoSid) <=> (reg[c].anchor = NoAnchor)
    /\ term \in [CLIs -> {"None", "Sandbox"} \cup Requests]
    /\ held \in [CLIs -> BOOLEAN]
    /\ spoiled \in [CLIs -> BOOLEAN]
    /\ reqPhase \in [Requests -> ReqPhases]
    /\ reqClaim \in [Requests -> Tuples \cup {NoTuple}]
    /\ reqCred \in [Requests -> Creds \cup {NoCred}]
    /\ reqCmd \in [Requests -> Commands \cup {NoCmd}]
    /\ approval \in [Requests -> Approvals]
    /\ runCmd \in [Requests -> Commands \cup {NoCmd}]
    /\ decidedBy \in [Requests -> CLIs \cup {NoCli}]
    /\ outcome \in [Requests -> Outcomes \cup {"None"}]
    /\ host \subseteq Requests

\* At most one coordinator per Domain, and it is the lock holder; while a
\* generation is being started, run, stopped or recovered, its coordinator
\* is alive.
ExclusiveBootstrap ==
    /\ Cardinality(hc) <= 1
    /\ hc \subseteq {lock}
    /\ (lock # NoCli) => (lock \in hc)
    /\ phase \in {"Starting", "Ready", "Stopping", "Recovering"} => CoordinatorAlive
    /\ phase = "Absent" => lock = NoCli
    /\ \A c \in CLIs : cli[c] = "Spawning" => c = lock

\* Only the lock-holding coordinator has the store open.
StoreOnlyByLockHolder ==
    storeOwner # NoCli => (storeOwner = lock /\ storeOwner \in hc)

\* Startup order: every intended resource's prerequisites exist; the lower
\* is leased and prepared under the supervisor; trust precedes network.
StartupOrdering ==
    /\ \A d \in Res : intent[d] => \A k \in Needs(d) : res[k]
    /\ intent["supervisor"] => lease /\ artifact = "Ready"
    /\ lease => domainCfg # NoCfg \/ phase \in {"Failed", "Recovering"}
    /\ trust => res["mount"] /\ phase \in {"Starting", "Ready"}
    /\ phase \in {"Starting", "Ready"} /\ intent["netns"] => trust

\* Enforcement netns, then helper, then policy, then attested readiness,
\* and only then the sandbox.
OrderedNetworkStartup ==
    /\ res["helper"] => res["netns"]
    /\ policy => res["netns"]
    /\ phase \in {"Starting", "Ready"} /\ policy => res["helper"]
    /\ netAttest # NoId => policy /\ res["helper"] /\ res["netns"]
    /\ res["sandbox"] => res["helper"] /\ res["netns"] /\ policy
    /\ phase \in {"Starting", "Ready"} /\ intent["sandbox"] => NetworkReady
    /\ probed => res["sandbox"]

PublishedImpliesReady ==
    published =>
        /\ phase = "Ready"
        /\ CoordinatorAlive
        /\ HcHoldsStore
        /\ lease /\ artifact = "Ready"
        /\ \A k \in Res : res[k]
        /\ trust /\ NetworkReady /\ probed

TeardownNotJoinable ==
    phase \in {"Absent", "Starting", "Stopping", "Failed", "Recovering"} =>
        /\ ~published
        /\ Registered = {}
        /\ connected = {}

RegisteredSubsetConnected ==
    /\ Registered \subseteq connected
    /\ \A c \in CLIs : (c \in connected) <=> (cli[c] \in {"Connected", "Attached"})
    /\ \A c \in CLIs : (c \in Registered) <=> (cli[c] = "Attached")

\* Every request the coordinator accepted carries a valid credential and
\* exactly the tuple of the live session it is bound to.
AuthenticatedRequestsOnly ==
    \A r \in Requests : reqPhase[r] \in AcceptedPhases =>
        /\ reqCred[r] = "Signed"
        /\ Owner(r) \in Registered
        /\ reqClaim[r] = TupleOf(Owner(r))

\* Generation component ids are distinct per role, never a Client CLI ID,
\* and network readiness is keyed by the Network Sidecar role id.
RoleIdentitySeparation ==
    /\ domainCfg # NoCfg =>
          /\ \A x, y \in Roles : x # y => compIds[x] # compIds[y]
          /\ \A x \in Roles : compIds[x] \in ComponentIds
    /\ \A x \in Roles : compIds[x] \notin CLIs
    /\ netAttest # NoId => netAttest = compIds["sidecar"]

UniqueSessionIdentities ==
    \A c, d \in Registered : c # d =>
        /\ reg[c].sid # reg[d].sid
        /\ reg[c].anchor # reg[d].anchor

\* A developer decision came from the requesting session's own terminal.
DeveloperApprovalAuthenticated ==
    \A r \in Requests :
        /\ approval[r] = "Developer" /\ reqPhase[r] = "Executing" =>
              /\ decidedBy[r] = Owner(r)
              /\ runCmd[r] \in Commands
        /\ (reqPhase[r] \in AcceptedPhases /\ decidedBy[r] # NoCli) =>
              decidedBy[r] = Owner(r)

HostExecutionAuthorized ==
    \A r \in host :
        /\ reqPhase[r] = "Executing"
        /\ approval[r] \in {"Auto", "Developer"}
        /\ runCmd[r] \in Commands
        /\ approval[r] = "Developer" => decidedBy[r] = Owner(r)
        /\ approval[r] = "Auto" => runCmd[r] = reqCmd[r]

\* Auto-approval only for an exact rule match that needs no shell.
AutoApprovalWithoutShell ==
    \A r \in Requests : approval[r] = "Auto" /\ reqPhase[r] = "Executing" =>
        /\ runCmd[r] = reqCmd[r]
        /\ runCmd[r] \in AutoRuleCmds
        /\ runCmd[r] \notin ShellCmds
        /\ decidedBy[r] = NoCli

\* A prompt is shown only with the terminal owned by the broker: no output
\* of the session reaches a terminal while it shows a prompt, and nothing
\* held back is left to be released while it does.
PromptOwnsTerminal ==
    \A c \in CLIs :
        /\ ~spoiled[c]
        /\ term[c] \in Requests => ~held[c]

\* A prompt is shown only on the requesting session's terminal, each prompt
\* on exactly one terminal, and only registered sessions have a terminal.
TerminalIsolation ==
    /\ \A c \in CLIs : term[c] \in Requests =>
          /\ Owner(term[c]) = c
          /\ reqPhase[term[c]] = "Prompting"
    /\ \A r \in Requests : reqPhase[r] = "Prompting" => term[Owner(r)] = r
    /\ \A c \in CLIs : (term[c] # "None") <=> (c \in Registered)

\* No host command runs without a live, registered owner and coordinator,
\* and an executing request always has its host command accounted for.
NoOrphanHostProcess ==
    /\ \A r \in host :
          /\ reqPhase[r] = "Executing"
          /\ Owner(r) \in Registered
          /\ CoordinatorAlive
          /\ phase = "Ready"
    /\ \A r \in Requests : reqPhase[r] = "Executing" => r \in host
    \* Host commands that outlived a crashed coordinator exist only while the
    \* Domain is failed or being recovered, never next to a published or new
    \* generation, and never once it is Absent.
    /\ stray # {} => phase \in {"Failed", "Recovering"} /\ ~published
    /\ stray \cap host = {}

\* Nothing runs before a decision: a request waiting for one (queued or on
\* screen) has no approval and no host command; an expired request never ran.
NoExecutionWithoutDecision ==
    \A r \in Requests :
        /\ reqPhase[r] \in {"Accepted", "Prompting"} => approval[r] = "None" /\ r \notin host
        /\ outcome[r] = "Expired" => r \notin host

\* The State Anchor is mounted only over a leased, prepared lower, by a
\* recorded owner, and never while the Domain is Absent.
StateAnchorOwnership ==
    res["mount"] =>
        /\ intent["mount"]
        /\ lease /\ artifact = "Ready"
        /\ res["supervisor"]
        /\ phase # "Absent"

\* GC never takes a leased lower.
PreparedLowerLeased ==
    lease /\ (intent["supervisor"] \/ res["mount"]) => artifact = "Ready"

\* The connectivity helper lives in the generation's netns under its
\* supervisor and is recorded for exact-ownership recovery.
HelperOwnership ==
    res["helper"] => intent["helper"] /\ res["netns"] /\ res["supervisor"]

\* Nothing exists without a durable intent, so recovery can find it all.
DurableIntentCoversResources ==
    \A k \in Res : res[k] => intent[k]

\* Absent means clean: nothing recorded, running, mounted or leased.
AbsentIsClean ==
    phase = "Absent" =>
        /\ NoIntents /\ \A k \in Res : ~res[k]
        /\ ~lease /\ ~trust /\ ~policy /\ netAttest = NoId /\ ~probed
        /\ storeOwner = NoCli
        /\ host = {} /\ stray = {}

FailedDomainIsolation ==
    phase \in {"Failed", "Recovering"} =>
        /\ ~published
        /\ Registered = {}
        /\ connected = {}
        /\ ~trust
        /\ host = {}
        /\ \A r \in Requests : reqPhase[r] \notin AcceptedPhases

\* Recovery goes sandbox -> network -> State Anchor (-> supervisor).
OrderedFailureRecovery ==
    phase = "Recovering" =>
        /\ (~intent["helper"] \/ ~intent["netns"]) => ~intent["sandbox"]
        /\ ~intent["mount"] => ~intent["sandbox"] /\ ~intent["helper"] /\ ~intent["netns"]
        /\ ~intent["supervisor"] => \A k \in Res : ~intent[k]
        /\ ~lease => NoIntents

\* A result exists exactly for resolved requests, says what happened, and
\* is delivered only to a live owner (a delivered record is wiped).
ResultDeliveryConsistency ==
    \A r \in Requests :
        /\ (outcome[r] # "None") <=> (reqPhase[r] = "Resolved")
        /\ outcome[r] = "Denied" => decidedBy[r] = Owner(r)
        /\ reqPhase[r] = "Resolved" => Owner(r) \in Registered /\ r \notin host
        /\ reqPhase[r] \in {"Rejected", "Abandoned", "Unused", "Delivered"} =>
              outcome[r] = "None" /\ r \notin host

-----------------------------------------------------------------------------
(***************************************************************************)
(* Liveness                                                                *)
(***************************************************************************)

\* Every accepted request ends: its result is delivered, or it is
\* abandoned because its session went away.
RequestEventuallyResolves ==
    \A r \in Requests : reqPhase[r] \in AcceptedPhases ~> reqPhase[r] \in ClosedPhases

\* A terminal showing a prompt goes back to the sandbox session (or the
\* session is gone).  Stronger than "this prompt goes away": the terminal
\* is really handed back before any next prompt.
PromptRestoresTerminal ==
    \A c \in CLIs : term[c] \in Requests ~> term[c] \in {"Sandbox", "None"}

\* A live Domain with no session stops, unless a session arrives.
EmptyDomainStops ==
    (phase \in {"Ready", "Stopping"} /\ Registered = {})
        ~> (phase = "Absent" \/ Registered # {})

FailedDomainRecovers ==
    phase = "Failed" ~> phase = "Absent"

=============================================================================
