/**
 * Asynchronous calls' state (call_tool with `"async": true`): one entry per call, from its start to
 * its answer, kept for a bounded time and number so that a client may read how a call ended long
 * after it asked, and after a restart of the store. The interface (`AsyncResultsBackend`) and the
 * file beside the services file (`AsyncResultsFile`: one JSON document replaced atomically); the
 * cluster's Redis holds the same entries in replica mode (src/records/redis-async-results.ts). A
 * symlink at the file's path is never followed: the calls are then kept in memory only, and the
 * refusal is logged.
 */
import { basename, dirname, extname, join } from "node:path"
import { CoalescedWrites, readOwnJson, writeAtomically } from "../config/atomic-write.js"
import { log } from "../logging/log.js"

/** Where an asynchronous call is. `running` until it ends; `interrupted`: its store stopped while it ran. */
export type AsyncCallStatus = "running" | "completed" | "failed" | "cancelled" | "interrupted"

export const ASYNC_CALL_STATUSES = ["running", "completed", "failed", "cancelled", "interrupted"] as const satisfies ReadonlyArray<AsyncCallStatus>

/** The latest progress of a call, as its upstream sent it. */
export interface AsyncProgress {
  readonly progress: number
  readonly total: number | null
  readonly message: string | null
}

/** The answer a synchronous call_tool would have given: its HTTP status and its body. */
export interface AsyncAnswer {
  readonly http_status: number
  readonly body: unknown
}

/** One asynchronous call, as kept. */
export interface AsyncCallEntry {
  readonly call_id: string
  /** `store`, or the agent's id: only that scope's routes show it. */
  readonly scope: string
  /** A digest of the key that started it (never the key): only that key sees it. */
  readonly owner: string
  readonly tool_name: string
  /** The service the call went to, once known. */
  readonly service_name: string | null
  /** The tool's own name on its service, once known. */
  readonly original_name: string | null
  readonly status: AsyncCallStatus
  readonly progress: AsyncProgress | null
  /** ISO times. */
  readonly started_at: string
  readonly ended_at: string | null
  readonly answer: AsyncAnswer | null
  /** Why it failed, was cancelled or interrupted; null while it runs and when it completed. */
  readonly error: string | null
  readonly trace_id: string | null
  /** The call's arguments, kept while it runs only: the record of an interrupted call is taken from them. */
  readonly params?: unknown
  /** The replica that runs the call (replica mode); absent for one store. */
  readonly replica?: string | undefined
  /** The upstream's task the call follows (a server that answered it with a task): followed again after a restart. */
  readonly upstream_task?: string | undefined
}

/** The bounds of what is kept (`--max-async-results`, `--async-result-retention-seconds`, `--async-results-max-bytes`). */
export interface AsyncResultsOptions {
  /** Finished calls kept; beyond it the oldest finished are dropped. */
  readonly maxFinished: number
  /** Seconds a finished call is kept after its end. */
  readonly retentionSeconds: number
  /** Bytes of JSON of every finished answer together; beyond it the oldest finished are dropped. */
  readonly maxBytes: number
}

/** Where asynchronous calls are kept: the file beside the services file, or the cluster's Redis. */
export interface AsyncResultsBackend {
  /** A call that starts (status `running`). */
  start(entry: AsyncCallEntry): Promise<void>
  /** A running call's latest progress (kept where other replicas read it; the file keeps it in memory). */
  progress(callId: string, progress: AsyncProgress): void
  /** A call's target, once resolved. */
  target(callId: string, target: { readonly service_name: string; readonly original_name: string; readonly trace_id: string }): void
  /** The upstream task a running call follows, once its server answered with one. */
  task(callId: string, taskId: string): void
  /** A call that ended: resolves once its end is kept (on disk, or in Redis). */
  finish(entry: AsyncCallEntry): Promise<void>
  /** A call by its id, or undefined (unknown, or dropped by the bounds). */
  get(callId: string): Promise<AsyncCallEntry | undefined>
  /** The calls found running when this store started (the file's: its previous run's), now `interrupted`. */
  takeInterrupted(): Promise<ReadonlyArray<AsyncCallEntry>>
  /**
   * A call `takeInterrupted` gave has its record written, or is followed again (`start`): it may be
   * kept as it is now. Until then the file keeps it as it found it (running), so that a store killed
   * before records it, or follows it, at its next start.
   */
  settled(callId: string): void
  /** Finished calls kept now (for figures and tests). */
  finishedCount(): number
  close(): Promise<void>
}

/** The file of a services file's asynchronous calls: `mcp.json` -> `mcp.async-calls.json`. */
export const asyncResultsFileFor = (servicesFile: string): string => {
  const name = basename(servicesFile)
  const ext = extname(name)
  return join(dirname(servicesFile), `${name.slice(0, name.length - ext.length)}.async-calls.json`)
}

/** The size of an answer as it is kept and counted against `maxBytes`. */
export const answerBytes = (entry: AsyncCallEntry): number => (entry.answer === null ? 0 : Buffer.byteLength(JSON.stringify(entry.answer.body)))

/** An entry as it ends: its arguments are not kept once the call has its record. */
export const ended = (entry: AsyncCallEntry): AsyncCallEntry => {
  const { params: _params, ...rest } = entry
  return rest
}

/** Whether `value` has the shape of a kept entry (a file edited by hand is read, not trusted). */
const isEntry = (value: unknown): value is AsyncCallEntry => {
  if (typeof value !== "object" || value === null) return false
  const e = value as Record<string, unknown>
  return (
    typeof e["call_id"] === "string" &&
    typeof e["scope"] === "string" &&
    typeof e["owner"] === "string" &&
    typeof e["tool_name"] === "string" &&
    typeof e["started_at"] === "string" &&
    (ASYNC_CALL_STATUSES as ReadonlyArray<unknown>).includes(e["status"])
  )
}

/**
 * The asynchronous calls of one store in a file beside its services file. Every entry is in memory
 * (bounded: the running ones by the store's cap on them, the finished ones by count, bytes and
 * age); the file is one JSON document, replaced atomically (src/config/atomic-write.ts) after each
 * start, target and end, the writes of a burst coalesced into one. A call's end is on disk before `finish`
 * resolves, so an end a client has seen survives a kill of the store. Progress is kept in memory
 * only: after a restart a running call is `interrupted` (or followed again from its upstream task,
 * src/runtime/async-calls.ts), its progress of the moment no use.
 */
export class AsyncResultsFile implements AsyncResultsBackend {
  /** Every entry kept, in the order of their start. */
  private readonly entries = new Map<string, AsyncCallEntry>()
  /** Finished ids in the order of their end (the oldest first: the first dropped). */
  private readonly finished = new Map<string, number>()
  private finishedBytes = 0
  private interrupted: Array<AsyncCallEntry> = []
  /** The calls found running at start, written as they were found until `settled` (or `start`ed again). */
  private readonly foundRunning = new Map<string, AsyncCallEntry>()
  /** A symlink stood at the file's path: nothing is read from or written to it. */
  private refused = false
  private readonly writes = new CoalescedWrites(() => this.write())

  private constructor(
    readonly path: string,
    private readonly options: AsyncResultsOptions
  ) {}

  /** Opens the file of `servicesFile` (an absent file is an empty one); calls found running are marked interrupted. */
  static async open(servicesFile: string, options: AsyncResultsOptions): Promise<AsyncResultsFile> {
    const file = new AsyncResultsFile(asyncResultsFileFor(servicesFile), options)
    await file.load()
    return file
  }

  private async load(): Promise<void> {
    const doc = await readOwnJson(this.path, "Asynchronous calls", { refused: "async_calls_file_refused", unreadable: "async_calls_file_unreadable" }, "its calls are forgotten")
    if (doc === "link") this.refused = true
    if (doc === undefined || doc === "link") return
    const calls = (doc as { calls?: unknown } | null)?.calls
    if (!Array.isArray(calls)) return
    const now = new Date().toISOString()
    for (const value of calls) {
      if (!isEntry(value)) continue
      if (value.status === "running") {
        const entry: AsyncCallEntry = { ...value, status: "interrupted", ended_at: now, error: "the store stopped while the call ran", answer: null }
        this.interrupted.push(entry)
        this.foundRunning.set(value.call_id, value)
        this.keepFinished(ended(entry))
      } else {
        this.keepFinished(value)
      }
    }
    this.prune()
  }

  private keepFinished(entry: AsyncCallEntry): void {
    const previous = this.finished.get(entry.call_id)
    if (previous !== undefined) this.finishedBytes -= previous
    this.entries.delete(entry.call_id)
    this.entries.set(entry.call_id, entry)
    this.finished.delete(entry.call_id)
    const bytes = answerBytes(entry)
    this.finished.set(entry.call_id, bytes)
    this.finishedBytes += bytes
  }

  /** Drops the finished calls beyond the bounds: the oldest ended first. */
  private prune(): number {
    let dropped = 0
    const oldest = Date.now() - this.options.retentionSeconds * 1000
    for (const [id, bytes] of this.finished) {
      const entry = this.entries.get(id)
      const over = this.finished.size > this.options.maxFinished || this.finishedBytes > this.options.maxBytes
      const expired = entry === undefined || entry.ended_at === null || Date.parse(entry.ended_at) < oldest
      // Ended in order: the first one kept by both bounds ends the look.
      if (!over && !expired) break
      this.finished.delete(id)
      this.entries.delete(id)
      this.finishedBytes -= bytes
      dropped += 1
    }
    return dropped
  }

  /** Writes the file after the write under way, if any (the changes made meanwhile, coalesced). */
  private persist(): Promise<void> {
    return this.writes.persist()
  }

  private async write(): Promise<void> {
    if (this.refused) return
    // The calls found running stay as found until settled, even past the bounds on finished calls.
    const kept = [...this.entries.values()].map((e) => this.foundRunning.get(e.call_id) ?? e)
    const pruned = [...this.foundRunning.values()].filter((e) => !this.entries.has(e.call_id))
    const text = JSON.stringify({ version: 1, calls: [...pruned, ...kept] })
    try {
      await writeAtomically(this.path, text)
    } catch (e) {
      log.error(`asynchronous calls file ${this.path} could not be written: ${e instanceof Error ? e.message : String(e)}`, { event: "async_calls_write_failed", file: this.path })
    }
  }

  start(entry: AsyncCallEntry): Promise<void> {
    this.foundRunning.delete(entry.call_id)
    // A call followed again after a restart was kept as a finished (interrupted) one meanwhile.
    const bytes = this.finished.get(entry.call_id)
    if (bytes !== undefined) {
      this.finished.delete(entry.call_id)
      this.finishedBytes -= bytes
      this.entries.delete(entry.call_id)
    }
    this.entries.set(entry.call_id, entry)
    return this.persist()
  }

  task(callId: string, taskId: string): void {
    const entry = this.entries.get(callId)
    if (entry?.status !== "running") return
    this.entries.set(callId, { ...entry, upstream_task: taskId })
    // On disk at once: a store killed from now on follows the task again at its next start.
    void this.persist()
  }

  progress(callId: string, progress: AsyncProgress): void {
    const entry = this.entries.get(callId)
    if (entry?.status === "running") this.entries.set(callId, { ...entry, progress })
  }

  target(callId: string, target: { readonly service_name: string; readonly original_name: string; readonly trace_id: string }): void {
    const entry = this.entries.get(callId)
    if (entry?.status !== "running") return
    this.entries.set(callId, { ...entry, ...target })
    // On disk too: an interrupted call's record names its service.
    void this.persist()
  }

  finish(entry: AsyncCallEntry): Promise<void> {
    this.keepFinished(ended(entry))
    const dropped = this.prune()
    if (dropped > 0) log.info(`dropped ${dropped} finished asynchronous call(s) beyond the bounds`, { event: "async_calls_dropped", count: dropped })
    return this.persist()
  }

  get(callId: string): Promise<AsyncCallEntry | undefined> {
    if (this.prune() > 0) void this.persist()
    return Promise.resolve(this.entries.get(callId))
  }

  takeInterrupted(): Promise<ReadonlyArray<AsyncCallEntry>> {
    const taken = this.interrupted
    this.interrupted = []
    return Promise.resolve(taken)
  }

  settled(callId: string): void {
    if (this.foundRunning.delete(callId)) void this.persist()
  }

  finishedCount(): number {
    return this.finished.size
  }

  close(): Promise<void> {
    return this.writes.close()
  }
}
