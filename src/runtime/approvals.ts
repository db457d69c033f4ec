/**
 * Calls waiting for a person's approval (README, "Approvals"): a call whose service's
 * `require_approval` matches its tool waits here, in the call pipeline (src/runtime/calls.ts),
 * until a key allowed to approve decides it (`POST /for_store/approvals/{approval_id}`, the
 * dashboard), its time-out passes, or its caller goes away. An approval is bound to its call: one
 * call of one tool with one set of arguments (their digest shown beside them), decided once.
 *
 * Bounded: at most `max` approvals pending in the store and `perKey` for one caller (a refusal past
 * either is a `TooMany`), each for at most its time-out (one unref'd timer, cleared when it ends);
 * the arguments a list shows are cut to the records' limit. Every change is a log line and an
 * event for `/events`. The approvals live in the process that runs the call: in replica mode the
 * replica the call reached (docs/approvals.md), which shares each pending one's view with the
 * cluster (`ApprovalsReplica`, implemented in src/cluster/shared-approvals.ts): any replica lists
 * it, and a decision made on another replica is carried to this one and applied here.
 */
import { randomBytes } from "node:crypto"
import { TooMany } from "../domain/errors.js"
import { argumentsDigest } from "../domain/approval-policy.js"
import { log } from "../logging/log.js"
import type { CancelSignal } from "../domain/cancellation.js"
import { cutValue, DEFAULT_MAX_VALUE_BYTES } from "../records/tool-records.js"

/** What a call asks approval for. */
export interface ApprovalAsk {
  /** `store`, or the agent's id. */
  readonly scope: string
  readonly serviceName: string
  /** The tool's own name on its service. */
  readonly original: string
  /** The callable name `<service>__<tool>`. */
  readonly toolName: string
  readonly args: Readonly<Record<string, unknown>>
  /** Who made the call, in words (`agent 'a1' key 'ci'`, `admin key`): shown to the approver. */
  readonly caller: string
  /** Which caller the per-key cap counts the approval against (a digest of its key, or its words). */
  readonly owner: string
  readonly traceId: string
  /** The asynchronous call's id, when the call is one. */
  readonly callId?: string | undefined
}

/** A pending approval as the list, the events and the page show it. */
export interface ApprovalView {
  readonly approval_id: string
  readonly scope: string
  readonly agent_id: string | null
  readonly service_name: string
  readonly tool_name: string
  readonly original_name: string
  /** The call's arguments (cut to the records' limit: then `arguments_truncated`). */
  readonly arguments: unknown
  readonly arguments_truncated?: boolean
  /** SHA-256 (hex) of the arguments' canonical JSON: what the decision is bound to. */
  readonly arguments_digest: string
  readonly caller: string
  readonly trace_id: string
  readonly call_id: string | null
  readonly requested_at: string
  readonly expires_at: string
  /** The page that shows it with Approve / Deny (null until the server knows its own URL). */
  readonly approval_url: string | null
}

/** How an approval ended. */
export type ApprovalEnd =
  | { readonly decision: "approved"; readonly by: string }
  | { readonly decision: "denied"; readonly by: string }
  | { readonly decision: "timeout" }
  | { readonly decision: "cancelled"; readonly reason: unknown }

/** An approval's change, for `/events` (event `approval`). */
export interface ApprovalEvent extends ApprovalView {
  readonly status: "pending" | "approved" | "denied" | "timed_out" | "cancelled"
  readonly decided_by: string | null
}

/** A pending approval of another replica, as the cluster shares it. */
export interface SharedApproval {
  readonly view: ApprovalView
  /** The id of the replica whose call waits for it. */
  readonly holder: string
}

/** What a decision carried to the holder answers: the view it had, a digest mismatch, or nothing pending there. */
export type RemoteDecision = { readonly decided: ApprovalView } | { readonly mismatch: true } | { readonly missing: true }

/**
 * The approvals of a cluster (replica mode; none for one store): what this replica shares of its
 * own, and how it reaches the others'. Every call to it has a time-out (its Redis commands and
 * forwarded requests); `put`/`remove`/`announce` are best effort (a failure is a log line).
 */
export interface ApprovalsReplica {
  readonly replicaId: string
  /** Shares a pending approval's view (until it ends, at most until `until`, epoch ms). */
  put(view: ApprovalView, until: number): void
  /** Stops sharing an approval that ended. */
  remove(id: string): void
  /** Tells the other replicas' `/events` of an approval's change. */
  announce(event: ApprovalEvent): void
  /** Hears the other replicas' approval changes; returns how to stop. */
  follow(listener: (event: ApprovalEvent) => void): () => void
  /** The pending approvals other live replicas hold (rejects when Redis cannot be reached). */
  others(): Promise<ReadonlyArray<SharedApproval>>
  /** One pending approval another live replica holds, or undefined (rejects when Redis cannot be reached). */
  find(id: string): Promise<SharedApproval | undefined>
  /** Carries a decision to the holder; `gone` when it is no longer in the cluster, `unknown` when it did not answer (the decision may have been applied). */
  decideOn(holder: string, id: string, decision: "approve" | "deny", by: string, digest: string | undefined): Promise<RemoteDecision | { readonly gone: string } | { readonly unknown: string }>
}

/**
 * A decision's outcome: the decided approval; "mismatch" (another digest); undefined (no such
 * call); `gone` (its holder left the cluster: nothing was decided); `unknown` (its holder did not
 * answer: it may have applied the decision).
 */
export type Decision = ApprovalView | "mismatch" | undefined | { readonly gone: string } | { readonly unknown: string }

/** A pending approval: its view, and how to end it. */
interface Pending {
  readonly view: ApprovalView
  readonly owner: string
  readonly end: (end: ApprovalEnd) => void
}

export interface ApprovalLimits {
  /** Approvals pending in the store at once. */
  readonly max: number
  /** Approvals pending for one caller at once. */
  readonly perKey: number
}

/** An approval id: `apr_` and 128 random bits (unguessable: the id alone never decides anything, a key does). */
const newApprovalId = (): string => `apr_${randomBytes(16).toString("base64url")}`

/** The longest an id may be to be looked up at all. */
const MAX_ID_LENGTH = 64

/** The store's pending approvals (one per store, `Store.approvals`). */
export class Approvals {
  private readonly pending = new Map<string, Pending>()
  private readonly perOwner = new Map<string, number>()
  private readonly listeners = new Set<(e: ApprovalEvent) => void>()
  private closed = false
  /** Where the approval page is (`<base>/ui`), set by the HTTP server once it listens. */
  pageUrl: string | undefined

  /** Stops hearing the other replicas' changes (replica mode). */
  private readonly unfollow: (() => void) | undefined

  constructor(
    private readonly limits: ApprovalLimits,
    private readonly replica?: ApprovalsReplica | undefined
  ) {
    // Another replica's approval changes reach this one's `/events` listeners (its own are emitted as they happen).
    this.unfollow = replica?.follow((e) => this.emit(e))
  }

  /** How many approvals are pending. */
  get size(): number {
    return this.pending.size
  }

  /** Hears every approval's change (the `/events` streams); returns how to stop. */
  on(listener: (e: ApprovalEvent) => void): () => void {
    this.listeners.add(listener)
    return () => void this.listeners.delete(listener)
  }

  /**
   * Asks an approval for a call: pending until decided, `timeoutMs` passes, or `signal` aborts
   * (the caller went away; the store stopping). `announce` is told the pending view at once (the
   * caller's progress, a URL elicitation). A TooMany when a cap is reached: nothing is kept.
   */
  ask(ask: ApprovalAsk, timeoutMs: number, signal: CancelSignal): { readonly view: ApprovalView; readonly ended: Promise<ApprovalEnd> } | TooMany {
    if (this.closed) return new TooMany({ message: "The store is stopping: no approval can be asked", limit: "max_approvals", max: this.limits.max, retryAfterSeconds: 1 })
    const mine = this.perOwner.get(ask.owner) ?? 0
    if (this.pending.size >= this.limits.max || mine >= this.limits.perKey) {
      const perKey = mine >= this.limits.perKey
      const message = perKey
        ? `Tool '${ask.toolName}' needs an approval, and this caller already has ${mine} calls waiting for one (max_approvals_per_key ${this.limits.perKey}): try again once one is decided`
        : `Tool '${ask.toolName}' needs an approval, and ${this.pending.size} calls already wait for one (max_approvals ${this.limits.max}): try again later`
      log.warn(`refused an approval in ${ask.scope === "store" ? "the store" : `agent '${ask.scope}'`}: ${message}`, { event: "approval_refused", scope: ask.scope, service: ask.serviceName, tool: ask.original, trace_id: ask.traceId })
      return new TooMany({ message, limit: perKey ? "max_approvals_per_key" : "max_approvals", max: perKey ? this.limits.perKey : this.limits.max, retryAfterSeconds: 5 })
    }
    const id = newApprovalId()
    const now = Date.now()
    const shown = cutValue(ask.args, DEFAULT_MAX_VALUE_BYTES)
    const view: ApprovalView = {
      approval_id: id,
      scope: ask.scope,
      agent_id: ask.scope === "store" ? null : ask.scope,
      service_name: ask.serviceName,
      tool_name: ask.toolName,
      original_name: ask.original,
      arguments: shown.value,
      ...(shown.truncated ? { arguments_truncated: true } : {}),
      arguments_digest: argumentsDigest(ask.args),
      caller: ask.caller,
      trace_id: ask.traceId,
      call_id: ask.callId ?? null,
      requested_at: new Date(now).toISOString(),
      expires_at: new Date(now + timeoutMs).toISOString(),
      approval_url: this.pageUrl === undefined ? null : `${this.pageUrl}#approval=${id}`
    }
    let resolve!: (end: ApprovalEnd) => void
    const ended = new Promise<ApprovalEnd>((r) => (resolve = r))
    const onAbort = () => end({ decision: "cancelled", reason: signal.reason })
    const timer = setTimeout(() => end({ decision: "timeout" }), timeoutMs)
    timer.unref()
    const end = (how: ApprovalEnd): void => {
      if (!this.pending.delete(id)) return
      clearTimeout(timer)
      signal.removeEventListener("abort", onAbort)
      const left = (this.perOwner.get(ask.owner) ?? 1) - 1
      if (left <= 0) this.perOwner.delete(ask.owner)
      else this.perOwner.set(ask.owner, left)
      const status = how.decision === "timeout" ? "timed_out" : how.decision
      const by = how.decision === "approved" || how.decision === "denied" ? how.by : null
      const where = ask.scope === "store" ? "the store" : `agent '${ask.scope}'`
      const line = `approval ${id} of ${ask.toolName} in ${where} ${status === "timed_out" ? `timed out after ${Math.round(timeoutMs / 1000)} s` : status}${by === null ? "" : ` by ${by}`}`
      const fields = { event: "approval", approval_id: id, status, scope: ask.scope, service: ask.serviceName, tool: ask.original, trace_id: ask.traceId, ...(by === null ? {} : { decided_by: by }) }
      if (how.decision === "approved") log.info(line, fields)
      else log.warn(line, fields)
      const event: ApprovalEvent = { ...view, status, decided_by: by }
      this.emit(event)
      this.replica?.remove(id)
      this.replica?.announce(event)
      resolve(how)
    }
    this.pending.set(id, { view, owner: ask.owner, end })
    this.perOwner.set(ask.owner, mine + 1)
    this.replica?.put(view, now + timeoutMs)
    if (signal.aborted) {
      onAbort()
      return { view, ended }
    }
    signal.addEventListener("abort", onAbort, { once: true })
    log.info(`call of ${ask.toolName} in ${ask.scope === "store" ? "the store" : `agent '${ask.scope}'`} waits for approval ${id} (by ${ask.caller}, arguments ${view.arguments_digest.slice(0, 12)})`, {
      event: "approval",
      approval_id: id,
      status: "pending",
      scope: ask.scope,
      service: ask.serviceName,
      tool: ask.original,
      trace_id: ask.traceId
    })
    const pendingEvent: ApprovalEvent = { ...view, status: "pending", decided_by: null }
    this.emit(pendingEvent)
    this.replica?.announce(pendingEvent)
    return { view, ended }
  }

  /** The pending approvals, oldest first; of one scope (`store` or an agent's id) when `scope` is given. */
  list(scope?: string): ReadonlyArray<ApprovalView> {
    const out: Array<ApprovalView> = []
    for (const p of this.pending.values()) if (scope === undefined || p.view.scope === scope) out.push(p.view)
    return out
  }

  /** One pending approval, or undefined. */
  get(id: string): ApprovalView | undefined {
    return id.length > MAX_ID_LENGTH ? undefined : this.pending.get(id)?.view
  }

  /**
   * Decides a pending approval (`by`: the deciding key's label, as records and logs name it); the
   * view it had, or undefined when no approval of that id is pending (unknown, decided, ended).
   * When `digest` is given, it must be the approval's arguments digest (a decision made on what the
   * approver saw): otherwise nothing changes and `mismatch` is answered.
   */
  decide(id: string, decision: "approve" | "deny", by: string, digest?: string): ApprovalView | "mismatch" | undefined {
    const p = id.length > MAX_ID_LENGTH ? undefined : this.pending.get(id)
    if (p === undefined) return undefined
    if (digest !== undefined && digest !== p.view.arguments_digest) return "mismatch"
    p.end(decision === "approve" ? { decision: "approved", by } : { decision: "denied", by })
    return p.view
  }

  /**
   * The pending approvals of the whole cluster (replica mode; this store's otherwise), oldest first,
   * of one scope when `scope` is given. When Redis cannot be reached, this replica's own (a warning).
   */
  async listAll(scope?: string): Promise<ReadonlyArray<ApprovalView>> {
    const mine = this.list(scope)
    if (this.replica === undefined) return mine
    let others: ReadonlyArray<SharedApproval>
    try {
      others = await this.replica.others()
    } catch (e) {
      log.warn(`the cluster's approvals cannot be read (${(e as Error).message}): this replica lists its own`, { event: "cluster_approvals_failed" })
      return mine
    }
    const seen = new Set(mine.map((v) => v.approval_id))
    const out = [...mine]
    for (const o of others) if (!seen.has(o.view.approval_id) && (scope === undefined || o.view.scope === scope)) out.push(o.view)
    return out.sort((a, b) => a.requested_at.localeCompare(b.requested_at))
  }

  /** One pending approval of the cluster, or undefined; rejects when it is not this replica's and Redis cannot be reached (whether it waits is not known). */
  async find(id: string): Promise<ApprovalView | undefined> {
    const here = this.get(id)
    if (here !== undefined || this.replica === undefined || id.length > MAX_ID_LENGTH) return here
    return (await this.replica.find(id))?.view
  }

  /**
   * Decides a pending approval of the cluster: here when this replica holds it, else carried to its
   * holder (replica mode), which applies it as `decide` does. Rejects when Redis cannot be reached
   * to find the holder (nothing was decided).
   */
  async decideAnywhere(id: string, decision: "approve" | "deny", by: string, digest?: string): Promise<Decision> {
    const here = this.decide(id, decision, by, digest)
    if (here !== undefined || this.replica === undefined || id.length > MAX_ID_LENGTH) return here
    const shared = await this.replica.find(id)
    if (shared === undefined || shared.holder === this.replica.replicaId) return undefined
    const answer = await this.replica.decideOn(shared.holder, id, decision, by, digest)
    if ("gone" in answer || "unknown" in answer) return answer
    if ("mismatch" in answer) return "mismatch"
    if ("missing" in answer) return undefined
    return answer.decided
  }

  /** The store stops: every pending approval ends as its call's cancellation; no new one is asked. */
  close(reason: unknown): void {
    this.closed = true
    for (const p of [...this.pending.values()]) p.end({ decision: "cancelled", reason })
    this.unfollow?.()
  }

  private emit(e: ApprovalEvent): void {
    for (const listener of this.listeners) {
      try {
        listener(e)
      } catch (error) {
        log.error(`an approval listener failed: ${error instanceof Error ? error.message : String(error)}`, { event: "approval_listener_failed" })
      }
    }
  }
}
