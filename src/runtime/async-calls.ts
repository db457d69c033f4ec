/**
 * Asynchronous calls (call_tool with `"async": true`): the one call pipeline (`runCall` of
 * src/runtime/calls.ts) run detached from the request that started it, under an unguessable id.
 * Its state (running, its latest progress, how it ended and the answer a synchronous call would
 * have given) is kept by the `AsyncResultsBackend` of the store (a file beside the services file,
 * or the cluster's Redis), so it outlives the request, and the finished ones a restart. Each call is
 * visible only to the scope and the key that started it: anyone else is told it does not exist.
 * Cancelling one aborts the pipeline's cancel signal, the same path as a caller that goes away (the
 * upstream is sent `notifications/cancelled`, the record says `cancelled`).
 *
 * How an end is rendered is the face's (`AsyncRender`): this module knows of calls' exits, not of
 * HTTP. A call whose upstream answered with a task keeps the task's id (`upstream_task`); a store on
 * its own file that stops (or is killed) while such a call runs leaves the task running upstream,
 * and at its next start follows it again under the same call id (`resume`), so the call ends as it
 * would have and is recorded once. (In replica mode such a call is `interrupted` as any other.)
 */
import { randomBytes } from "node:crypto"
import { setTimeout as sleep } from "node:timers/promises"
import { Cause, Exit, Option } from "effect"
import { ClusterUnavailable, TooMany } from "../domain/errors.js"
import { log } from "../logging/log.js"
import { STORE_STOPPING } from "../mcp/types.js"
import { Cancel } from "../domain/cancellation.js"
import type { AsyncAnswer, AsyncCallEntry, AsyncCallStatus, AsyncProgress, AsyncResultsBackend } from "../records/async-results.js"
import type { RecordsBackend } from "../records/tool-records.js"
import { LatestThrottle } from "./progress.js"
import { resolveTarget, runCall, toolErrorMessage, type CallExit, type CallToolInput } from "./calls.js"
import type { ReplicationApi } from "./services.js"
import type { ScopeContext } from "./host.js"

/** How a face renders a call's end: the status and body a synchronous call would have answered (undefined when cancelled). */
export type AsyncRender = (exit: CallExit) => AsyncAnswer | undefined

/** A change of an asynchronous call, for `/events` (event `async_call`). */
export interface AsyncCallEvent {
  readonly call_id: string
  readonly scope: string
  readonly agent_id: string | null
  readonly tool_name: string
  readonly service_name: string | null
  /** The tool's own name on its service, once known. */
  readonly original_name: string | null
  readonly status: AsyncCallStatus
  readonly http_status: number | null
  readonly trace_id: string | null
}

/** An id nobody guesses: 192 random bits. */
const newCallId = (): string => `call_${randomBytes(24).toString("base64url")}`

/** The shape of an id (checked by the contract; the same rule here for the library). */
export const CALL_ID_PATTERN = /^call_[A-Za-z0-9_-]{32}$/

/** Progress reaches the backend at most once a second per call (Redis in replica mode). */
const STORED_PROGRESS_INTERVAL_MS = 1000

/** A running call of this store. */
interface LiveCall {
  entry: AsyncCallEntry
  readonly cancel: Cancel
  readonly stored: LatestThrottle<AsyncProgress>
  /** Set once the store stops: the pipeline's end is not this call's end any more. */
  interrupted: boolean
  /** Its end being kept (`end`): the store's stop waits for it rather than calling it interrupted. */
  kept?: Promise<boolean>
}

/** How often, and how long apart, an end the backend refused (Redis away) is tried again (ms): about a minute in all. */
const KEEP_RETRY_MS = [1_000, 2_000, 4_000, 8_000, 15_000, 30_000] as const

/** How a call ended, from its exit. */
const endOf = (exit: CallExit): { readonly status: AsyncCallStatus; readonly error: string | null } => {
  if (Exit.isSuccess(exit)) {
    const r = exit.value.result
    return r.isError === true ? { status: "failed", error: toolErrorMessage({ content: r.content ?? [] }) } : { status: "completed", error: null }
  }
  const failure = Cause.failureOption(exit.cause)
  if (Option.isSome(failure)) return { status: "failed", error: failure.value.message }
  if (Cause.isInterruptedOnly(exit.cause)) return { status: "cancelled", error: "the call was cancelled" }
  return { status: "failed", error: String(Cause.squash(exit.cause)) }
}

/** The store's asynchronous calls. */
export class AsyncCalls {
  private readonly live = new Map<string, LiveCall>()
  private readonly listeners = new Set<(e: AsyncCallEvent) => void>()
  private closing = false
  /** Aborted as the store stops: an end's next try (`keep`) is not waited for. */
  private readonly stopping = new AbortController()
  /** Calls a previous run left following an upstream task, to follow again (`resume`). */
  private toResume: Array<AsyncCallEntry> = []

  constructor(
    private readonly backend: AsyncResultsBackend,
    private readonly records: RecordsBackend,
    /** Running calls of this store at once (`--max-async-calls`). */
    private readonly maxRunning: number,
    /** Replica mode: this replica's id, and the other replicas reached (a call runs where its service runs). */
    private readonly replication?: Pick<ReplicationApi, "replicaId" | "cancelAsyncOn" | "ownerOf" | "startAsyncOn"> | undefined
  ) {
    this.replica = replication?.replicaId
    this.resumes = replication === undefined
  }

  /** Whether a call's upstream task is followed again after a restart: a store on its own file (not replicas). */
  private readonly resumes: boolean

  /** This replica's id in replica mode (kept with each call it runs). */
  private readonly replica: string | undefined

  /** Listens to calls' starts and ends (the `/events` streams). */
  on(listener: (e: AsyncCallEvent) => void): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  private emit(entry: AsyncCallEntry): void {
    const event: AsyncCallEvent = {
      call_id: entry.call_id,
      scope: entry.scope,
      agent_id: entry.scope === "store" ? null : entry.scope,
      tool_name: entry.tool_name,
      service_name: entry.service_name,
      original_name: entry.original_name,
      status: entry.status,
      http_status: entry.answer?.http_status ?? null,
      trace_id: entry.trace_id
    }
    for (const listener of this.listeners) listener(event)
  }

  /** Running calls of this store. */
  get running(): number {
    return this.live.size
  }

  /** Finished calls kept. */
  get finished(): number {
    return this.backend.finishedCount()
  }

  /**
   * Starts `input` in `ctx` detached, for the key whose digest is `owner`; answers once the call is
   * kept as running (so an id answered is an id that can be read). Refused (TooMany) at the cap;
   * in replica mode refused (ClusterUnavailable) when Redis does not keep it, and not started.
   */
  async start(ctx: ScopeContext, input: CallToolInput, owner: string, render: AsyncRender, options: { readonly here?: boolean } = {}): Promise<AsyncCallEntry | TooMany | ClusterUnavailable> {
    if (options.here !== true && !this.closing) {
      const elsewhere = await this.startElsewhere(ctx, input, owner)
      if (elsewhere !== undefined) return elsewhere
    }
    if (this.closing || this.live.size >= this.maxRunning) {
      const refusal = new TooMany({
        message: `Too many asynchronous calls running (max_async_calls is ${this.maxRunning}); try again later`,
        limit: "max_async_calls",
        max: this.maxRunning,
        retryAfterSeconds: 1
      })
      log.warn(`refused an asynchronous call of '${input.tool_name}' in ${ctx.label}: ${refusal.message}`, { event: "async_call_refused", scope: ctx.label, tool: input.tool_name })
      return refusal
    }
    const callId = newCallId()
    const entry: AsyncCallEntry = {
      call_id: callId,
      scope: ctx.label,
      owner,
      tool_name: input.tool_name,
      service_name: null,
      original_name: null,
      status: "running",
      progress: null,
      started_at: new Date().toISOString(),
      ended_at: null,
      answer: null,
      error: null,
      trace_id: null,
      params: input.args ?? {},
      ...(this.replica === undefined ? {} : { replica: this.replica })
    }
    const call: LiveCall = {
      entry,
      cancel: new Cancel(),
      stored: new LatestThrottle(STORED_PROGRESS_INTERVAL_MS, (p) => this.backend.progress(callId, p)),
      interrupted: false
    }
    this.live.set(callId, call)
    try {
      await this.backend.start(entry)
    } catch (e) {
      // Not kept as running: not started, and not counted against the cap.
      this.live.delete(callId)
      call.stored.close()
      const why = e instanceof Error ? e.message : String(e)
      log.error(`asynchronous call of '${input.tool_name}' in ${ctx.label} not started: it could not be kept as running (${why})`, { event: "async_call_refused", scope: ctx.label, tool: input.tool_name })
      if (this.replica !== undefined) return ClusterUnavailable.of(`the asynchronous call of '${input.tool_name}'`, e)
      throw e
    }
    log.info(`asynchronous call ${callId} of '${input.tool_name}' started in ${ctx.label}`, { event: "async_call_started", call_id: callId, scope: ctx.label, tool: input.tool_name })
    this.emit(entry)
    this.run(ctx, call, input, render)
    return entry
  }

  /** Runs a call kept as running (`call`) through the pipeline, its target, task and progress kept, its end then. */
  private run(ctx: ScopeContext, call: LiveCall, input: CallToolInput, render: AsyncRender): void {
    const callId = call.entry.call_id
    const run = runCall(
      ctx,
      {
        ...input,
        callId,
        onTarget: (t) => {
          call.entry = { ...call.entry, service_name: t.serviceName, original_name: t.original, trace_id: t.span.traceId }
          this.backend.target(callId, { service_name: t.serviceName, original_name: t.original, trace_id: t.span.traceId })
        },
        ...(this.resumes
          ? {
              onTask: (taskId: string) => {
                call.entry = { ...call.entry, upstream_task: taskId }
                this.backend.task(callId, taskId)
              }
            }
          : {}),
        onProgress: (p) => {
          const progress: AsyncProgress = { progress: p.progress, total: p.total ?? null, message: p.message ?? null }
          call.entry = { ...call.entry, progress }
          call.stored.push(progress)
        }
      },
      call.cancel
    )
    void run.then((exit) => this.end(call, exit, render))
  }

  /**
   * Follows again the upstream tasks of the calls a previous run left running (found by
   * `recordInterrupted`), each under its own call id, running again until the task's end, in the
   * scope `scopeOf` gives for its label (a scope gone: the call is recorded `interrupted`). Called
   * once the face that renders ends is up (the HTTP server). A task its server no longer knows ends
   * the call `failed`, with the server's words.
   */
  resume(render: AsyncRender, scopeOf: (label: string) => ScopeContext | undefined): void {
    this.resumer = { render, scopeOf }
    this.drainResumable()
  }

  /** How `resume` was asked to follow tasks again: calls found later (`recordInterrupted`) are followed at once. */
  private resumer: { readonly render: AsyncRender; readonly scopeOf: (label: string) => ScopeContext | undefined } | undefined

  private drainResumable(): void {
    if (this.resumer === undefined) return
    const { render, scopeOf } = this.resumer
    const entries = this.toResume
    this.toResume = []
    for (const kept of entries) {
      const ctx = scopeOf(kept.scope)
      if (this.closing || ctx === undefined || kept.upstream_task === undefined || this.live.size >= this.maxRunning) {
        this.recordInterruption(kept)
        continue
      }
      const entry: AsyncCallEntry = { ...kept, status: "running", ended_at: null, error: null, answer: null }
      const call: LiveCall = { entry, cancel: new Cancel(), stored: new LatestThrottle(STORED_PROGRESS_INTERVAL_MS, (p) => this.backend.progress(entry.call_id, p)), interrupted: false }
      this.live.set(entry.call_id, call)
      log.info(`asynchronous call ${entry.call_id} of '${entry.tool_name}' resumed: its upstream task ${kept.upstream_task.slice(0, 80)} is followed again`, {
        event: "async_call_resumed",
        call_id: entry.call_id,
        scope: entry.scope,
        tool: entry.tool_name
      })
      void this.backend.start(entry).then(() => {
        this.emit(entry)
        const args = (typeof entry.params === "object" && entry.params !== null ? entry.params : {}) as Record<string, unknown>
        // The name the call was made with (resolved again: the store may still be connecting the service).
        // Its original time-out is not kept: as long as the store allows.
        // Its kept owner (its caller's digest) names whose own connection a `per_user` service's task is followed on, as the call was made.
        const caller = () => ({ words: entry.scope === "store" ? "a caller of the store" : `a caller of agent '${entry.scope}'`, owner: entry.owner })
        const input: CallToolInput = { tool_name: entry.tool_name, args, followTask: kept.upstream_task, timeout: ctx.host.limits.maxCallSeconds, caller }
        this.run(ctx, call, input, render)
      })
    }
  }

  /**
   * Replica mode: a call whose service another replica runs is started there, so that the call
   * lives where its service does (its entry names that replica). Undefined: it runs here (one
   * store; the service is run here or by nobody now; the target is not resolved yet, or that
   * replica cannot be reached: the call's own steps then wait or refuse as any call's).
   */
  private async startElsewhere(ctx: ScopeContext, input: CallToolInput, owner: string): Promise<AsyncCallEntry | TooMany | ClusterUnavailable | undefined> {
    const { ownerOf, startAsyncOn } = this.replication ?? {}
    if (ownerOf === undefined || startAsyncOn === undefined) return undefined
    const target = resolveTarget(ctx, input, { expired: false, timeoutSeconds: 1 })
    if (target._tag !== "Found") return undefined
    const name = target.actor.getSnapshot().context.name
    const replica = await ownerOf(ctx.scope, name).catch(() => undefined)
    if (replica === undefined) return undefined
    try {
      const started = await startAsyncOn(replica, ctx.scope, name, {
        owner,
        input: { tool_name: input.tool_name, args: input.args, service_name: input.service_name, timeout: input.timeout, trace: input.trace }
      })
      if ("refused" in started) {
        log.warn(`refused an asynchronous call of '${input.tool_name}' in ${ctx.label} on replica ${replica}: ${started.refused}`, { event: "async_call_refused", scope: ctx.label, tool: input.tool_name })
        return new TooMany({ message: started.refused, limit: "max_async_calls", max: this.maxRunning, retryAfterSeconds: 1 })
      }
      if ("notStarted" in started) {
        log.warn(`asynchronous call of '${input.tool_name}': replica ${replica}, which runs ${name}, did not start it (${started.notStarted}); it runs here`, { event: "async_call_forward_failed", scope: ctx.label })
        return undefined
      }
      log.info(`asynchronous call ${started.call_id} of '${input.tool_name}' started on replica ${replica}, which runs ${name}`, { event: "async_call_forwarded", call_id: started.call_id, scope: ctx.label })
      return started
    } catch (e) {
      // The request may have reached it (no answer in time, a connection broken after it was sent):
      // started here too, the tool could run twice.
      const why = e instanceof Error ? e.message : String(e)
      log.warn(`asynchronous call of '${input.tool_name}': replica ${replica}, which runs ${name}, did not say whether it started it (${why}); not started here`, { event: "async_call_forward_failed", scope: ctx.label })
      return new ClusterUnavailable({
        message: `The replica that runs '${name}' did not say whether it started the asynchronous call (${why}): it may run there, so it was not started here; look for it in the tool records before calling again`
      })
    }
  }

  /** A call's end: kept (its answer rendered by the face), logged, told to `/events`. */
  private async end(call: LiveCall, exit: CallExit, render: AsyncRender): Promise<void> {
    call.stored.close()
    if (call.interrupted) return // the store stopped first: kept as interrupted
    const { status, error } = endOf(exit)
    let answer: AsyncAnswer | null = null
    try {
      answer = render(exit) ?? null
    } catch (e) {
      log.error(`the answer of asynchronous call ${call.entry.call_id} could not be rendered: ${e instanceof Error ? e.message : String(e)}`, { event: "async_call_failed" })
    }
    const entry: AsyncCallEntry = { ...call.entry, status, error, answer, ended_at: new Date().toISOString() }
    call.kept = this.keep(entry, 0)
    const kept = await call.kept
    this.live.delete(entry.call_id)
    if (!kept) {
      // Read from here meanwhile; kept later, or given up (`keepLater`).
      this.unkept.set(entry.call_id, entry)
      const later = this.keepLater(entry)
      this.keeping.add(later)
      void later.finally(() => this.keeping.delete(later))
    }
    const fields = { event: "async_call_ended", call_id: entry.call_id, scope: entry.scope, tool: entry.tool_name, status, http_status: answer?.http_status ?? null }
    if (status === "failed") log.warn(`asynchronous call ${entry.call_id} of '${entry.tool_name}' failed: ${error ?? ""}`, fields)
    else log.info(`asynchronous call ${entry.call_id} of '${entry.tool_name}' ${status}`, fields)
    this.emit(entry)
  }

  /**
   * One try at keeping a call's end in the backend: whether it was kept. A refusal (Redis away, a
   * disk error) is a line, saying whether it is tried again (`KEEP_RETRY_MS[attempt]`). Never rejects.
   */
  private async keep(entry: AsyncCallEntry, attempt: number): Promise<boolean> {
    try {
      await this.backend.finish(entry)
      return true
    } catch (e) {
      const why = e instanceof Error ? e.message : String(e)
      const wait = this.closing ? undefined : KEEP_RETRY_MS[attempt]
      const next = wait === undefined ? "given up: a read of it on another replica may still find it running" : `trying again in ${wait / 1000} s`
      log.warn(`asynchronous call ${entry.call_id} of '${entry.tool_name}' ended ${entry.status}, but its end could not be kept (${why}); ${next}`, {
        event: "async_call_not_kept",
        call_id: entry.call_id,
        scope: entry.scope,
        tool: entry.tool_name
      })
      return false
    }
  }

  /**
   * An end the backend refused, tried again for about a minute (`KEEP_RETRY_MS`), read from
   * `unkept` meanwhile; the store's stop makes the last try at once.
   */
  private async keepLater(entry: AsyncCallEntry): Promise<void> {
    for (let attempt = 1; attempt <= KEEP_RETRY_MS.length; attempt++) {
      await sleep(KEEP_RETRY_MS[attempt - 1]!, undefined, { signal: this.stopping.signal, ref: false }).catch(() => undefined)
      if ((await this.keep(entry, attempt)) || this.closing) break
    }
    this.unkept.delete(entry.call_id)
  }

  /** Calls that ended here whose end the backend refused so far (`keepLater`): answered from here. */
  private readonly unkept = new Map<string, AsyncCallEntry>()
  /** The `keepLater` under way: the store's stop waits for their last try. */
  private readonly keeping = new Set<Promise<void>>()

  /** A call as its starter sees it: undefined when unknown, or another scope's or another key's. */
  async view(callId: string, scope: string, owner: string): Promise<AsyncCallEntry | undefined> {
    const live = this.live.get(callId)
    const entry = live?.entry ?? this.unkept.get(callId) ?? (await this.backend.get(callId))
    // A read may find a call whose replica is gone (replica mode): recorded here, once.
    if (live === undefined) void this.recordInterrupted()
    return entry !== undefined && entry.scope === scope && entry.owner === owner ? entry : undefined
  }

  /**
   * Cancels a running call of this store (the pipeline's cancel signal: the upstream is told, the
   * record says `cancelled`); resolves with the call once it ended. A call already ended is
   * answered as it is. Undefined as `view`.
   */
  async cancel(callId: string, scope: string, owner: string): Promise<AsyncCallEntry | undefined> {
    const live = this.live.get(callId)
    if (live === undefined || live.entry.scope !== scope || live.entry.owner !== owner) {
      const entry = await this.view(callId, scope, owner)
      // Replica mode: a call another replica runs is cancelled there.
      const cancelOn = this.replication?.cancelAsyncOn
      if (entry?.status === "running" && entry.replica !== undefined && entry.replica !== this.replica && cancelOn !== undefined) {
        log.info(`asynchronous call ${callId} of '${entry.tool_name}' cancelled by its caller, on replica ${entry.replica}`, { event: "async_call_cancel", call_id: callId, scope })
        const ended = await cancelOn(entry.replica, callId, scope, owner).catch((e: unknown) => {
          log.warn(`asynchronous call ${callId}: replica ${entry.replica} could not be asked to cancel it: ${e instanceof Error ? e.message : String(e)}`, { event: "async_call_cancel_failed", call_id: callId })
          return undefined
        })
        return ended ?? (await this.view(callId, scope, owner))
      }
      return entry
    }
    log.info(`asynchronous call ${callId} of '${live.entry.tool_name}' cancelled by its caller`, { event: "async_call_cancel", call_id: callId, scope })
    const ended = new Promise<void>((resolve) => {
      const off = this.on((e) => {
        if (e.call_id === callId && e.status !== "running") {
          off()
          resolve()
        }
      })
    })
    live.cancel.abort()
    await ended
    return this.view(callId, scope, owner)
  }

  /**
   * Records the calls the backend found running from a previous run (outcome `interrupted`); those
   * that followed an upstream task (a store on its own file) are kept to be followed again (`resume`).
   */
  async recordInterrupted(): Promise<void> {
    for (const entry of await this.backend.takeInterrupted()) {
      if (this.resumes && entry.upstream_task !== undefined && entry.service_name !== null && !this.closing) this.toResume.push(entry)
      else this.recordInterruption(entry)
    }
    this.drainResumable()
  }

  private recordInterruption(entry: AsyncCallEntry): void {
    log.warn(`asynchronous call ${entry.call_id} of '${entry.tool_name}' was interrupted: the store stopped while it ran`, {
      event: "async_call_interrupted",
      call_id: entry.call_id,
      scope: entry.scope,
      tool: entry.tool_name
    })
    const { written } = this.records.record({
      scope: entry.scope === "store" ? "store" : "agent",
      agent_id: entry.scope === "store" ? null : entry.scope,
      service_name: entry.service_name ?? "",
      tool_name: entry.original_name ?? entry.tool_name,
      params: entry.params ?? {},
      result: null,
      outcome: "interrupted",
      error: entry.error ?? "the store stopped while the call ran",
      duration_ms: Math.max(0, Date.parse(entry.ended_at ?? new Date().toISOString()) - Date.parse(entry.started_at)),
      trace_id: entry.trace_id ?? ""
    })
    // Its record written, the call may be kept as interrupted (a failed write leaves it to the next start).
    void (written ?? Promise.resolve()).then(
      () => this.backend.settled(entry.call_id),
      (e: unknown) => log.error(`a tool-call record could not be written: ${e instanceof Error ? e.message : String(e)}`, { event: "record_failed" })
    )
  }

  /**
   * The store stops: the calls still running are kept as `interrupted`, then cancelled with the
   * store's stop as the reason (their upstreams told; the pipeline records them `interrupted`).
   * Nothing starts from now on.
   */
  async close(): Promise<void> {
    this.closing = true
    this.stopping.abort()
    // Calls never followed again: interrupted.
    for (const entry of this.toResume.splice(0)) this.recordInterruption(entry)
    const ending: Array<Promise<void>> = []
    for (const call of this.live.values()) {
      // Its end is being kept: that is its end, not an interruption.
      if (call.kept !== undefined) {
        ending.push(call.kept.then(() => undefined))
        continue
      }
      call.interrupted = true
      call.stored.close()
      if (this.resumes && call.entry.upstream_task !== undefined) {
        // Left running on the file, its task upstream: the next start follows it again.
        log.info(`asynchronous call ${call.entry.call_id} of '${call.entry.tool_name}' stops with the store; its upstream task is followed again at the next start`, {
          event: "async_call_left",
          call_id: call.entry.call_id,
          scope: call.entry.scope,
          tool: call.entry.tool_name
        })
        call.cancel.abort(STORE_STOPPING)
        continue
      }
      const entry: AsyncCallEntry = { ...call.entry, status: "interrupted", error: "the store stopped while the call ran", answer: null, ended_at: new Date().toISOString() }
      log.warn(`asynchronous call ${entry.call_id} of '${entry.tool_name}' was interrupted: the store is stopping`, {
        event: "async_call_interrupted",
        call_id: entry.call_id,
        scope: entry.scope,
        tool: entry.tool_name
      })
      ending.push(this.backend.finish(entry).catch(() => undefined))
      call.cancel.abort(STORE_STOPPING)
    }
    this.live.clear()
    await Promise.all(ending)
    // Ends whose first try failed just now have their last try under way too (`keepLater`).
    await Promise.all([...this.keeping])
  }
}
