/**
 * Tool-call records (README, Tool-call records): an append-only JSON-lines file
 * beside the services file, one line per call, with in-memory aggregates for statistics that are
 * rebuilt from the file at start and kept up to date on each call.
 *
 * Appending costs the same whatever the file's size: one open handle in append mode, each line
 * written at once with one small synchronous write (a copy into the page cache, about 2 us here),
 * or, while the file is being maintained, with the others waiting in one write after it. The size limit drops the oldest
 * records until the file is under 80 % of it; the retention drops records older than the limit at
 * start and on every clean-up. Both rewrite the file atomically (temporary file, rename).
 *
 * The records hold call arguments and results, which may be secret: the file is 0600 (or stricter,
 * never looser), and it is never opened through a symlink (O_NOFOLLOW). A symlink planted at its
 * path is refused with a logged error; the records are then kept in memory only.
 */
import type { CallToolResult } from "@modelcontextprotocol/client"
import { randomUUID } from "node:crypto"
import { constants as fsConstants, ftruncateSync, writeSync } from "node:fs"
import { open, rename, rm, stat, type FileHandle } from "node:fs/promises"
import { basename, dirname, extname, join } from "node:path"
import { createInterface } from "node:readline"
import { sweptOnce } from "../config/atomic-write.js"
import { log } from "../logging/log.js"
import { RecordTallies, type Tally } from "./aggregates.js"

/** How a call ended. */
export type Outcome =
  | "success"
  | "tool_error"
  | "invalid_arguments"
  | "protocol_error"
  | "transport_error"
  | "message_too_large"
  | "timeout"
  | "unavailable"
  | "tool_not_allowed"
  /** The caller cancelled the call (MCP `notifications/cancelled`) or went away; the upstream was told. */
  | "cancelled"
  /** An asynchronous call that was running when its store stopped (found at the next start). */
  | "interrupted"
  /** The call needed an approval (README, Approvals) and was denied, or not asked (too many pending). */
  | "denied"
  /** The call needed an approval and nobody decided within the approval time-out. */
  | "approval_timeout"
  /** The tool is held: its definition changed since it was pinned, and nobody accepted the change yet. */
  | "tool_changed"
  /** The service takes per-user credentials and the caller has not given its own (README, Per-user credentials). */
  | "credentials_required"
export const OUTCOMES = [
  "success",
  "tool_error",
  "invalid_arguments",
  "protocol_error",
  "transport_error",
  "message_too_large",
  "timeout",
  "unavailable",
  "tool_not_allowed",
  "cancelled",
  "interrupted",
  "denied",
  "approval_timeout",
  "tool_changed",
  "credentials_required"
] as const satisfies ReadonlyArray<Outcome>

/**
 * Whether an outcome counts as an error (in summaries, error rates): a call the caller cancelled
 * does not, nor one a person denied or left undecided (the policy worked, nothing failed).
 */
export const isFailedOutcome = (o: Outcome): boolean => o !== "success" && o !== "cancelled" && o !== "denied" && o !== "approval_timeout"

/** One tool call, as `tool_records` and the records file show it. */
export interface ToolRecord {
  readonly id: string
  readonly timestamp: string
  readonly scope: "store" | "agent"
  readonly agent_id: string | null
  readonly service_name: string
  readonly tool_name: string
  readonly params: unknown
  readonly result: unknown
  readonly result_truncated?: boolean
  /** The parameters were longer than the limit: `params` is the start of their JSON text. */
  readonly params_truncated?: boolean
  readonly outcome: Outcome
  readonly error: string | null
  readonly duration_ms: number
  /** The call's W3C trace id: the caller's trace, or one the store started. */
  readonly trace_id: string
  /** The store's span of the call (the parent the upstream was given); absent in records of older versions. */
  readonly span_id?: string
  /** A call that needed an approval (README, Approvals): its id, and who approved or denied it (a key's label). */
  readonly approval?: { readonly approval_id: string; readonly decided_by: string | null }
}

export type NewRecord = Omit<ToolRecord, "id" | "timestamp" | "result_truncated" | "params_truncated"> & { readonly timestamp?: string }

export type { Tally } from "./aggregates.js"

export interface RecordsOptions {
  /** MB; -1 unlimited. */
  readonly maxFileSizeMb: number
  /** Days; -1 never delete. */
  readonly retentionDays: number
  /** How many of the newest records are kept in memory for queries. */
  readonly memoryLimit?: number
  /** A call's parameters and its result, each, at most this many bytes of JSON (`--tool-record-max-value-bytes`; default 64 KiB). */
  readonly maxValueBytes?: number
}

/** A filter of records; every field optional. */
export interface RecordQuery {
  /** `store`, or an agent id; undefined for every scope. */
  readonly scope?: string | undefined
  readonly service_name?: string | undefined
  readonly tool_name?: string | undefined
  readonly outcome?: Outcome | undefined
  /** Epoch ms. */
  readonly since?: number | undefined
  readonly limit?: number | undefined
  readonly offset?: number | undefined
}

/**
 * The records file of a services file: beside it, named after it (`mcp.json` ->
 * `mcp.records.jsonl`, `team.jsonc` -> `team.records.jsonl`), so two stores whose services files
 * share a folder keep their records apart.
 */
export const recordsFileFor = (servicesFile: string): string => {
  const name = basename(servicesFile)
  const ext = extname(name)
  return join(dirname(servicesFile), `${name.slice(0, name.length - ext.length)}.records.jsonl`)
}
/** Appending, created 0600 when missing, never through a symlink. */
const APPEND_FLAGS = fsConstants.O_WRONLY | fsConstants.O_APPEND | fsConstants.O_CREAT | fsConstants.O_NOFOLLOW
const READ_FLAGS = fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW
/** The default of `maxValueBytes`: parameters and result, each, 64 KiB of JSON. */
export const DEFAULT_MAX_VALUE_BYTES = 64 * 1024
const DAY_MS = 86_400_000

/** A record's scope as queries and aggregates name it: `store`, or the agent id. */
export const scopeKey = (r: Pick<ToolRecord, "scope" | "agent_id">) => (r.scope === "store" ? "store" : (r.agent_id ?? ""))

/**
 * Cuts a value (a call's parameters or result) to `limit` bytes of JSON: a longer one becomes the
 * start of its JSON text, cut on a character boundary, and is marked as cut by the caller.
 */
export const cutValue = (value: unknown, limit: number): { value: unknown; truncated: boolean } => {
  const text = JSON.stringify(value ?? null)
  // A UTF-16 unit is at most 3 bytes of UTF-8: short texts need no byte count.
  if (text.length <= limit / 3) return { value, truncated: false }
  const bytes = Buffer.from(text, "utf8")
  if (bytes.length <= limit) return { value, truncated: false }
  // Cut on a character boundary: back up over UTF-8 continuation bytes (10xxxxxx).
  let end = limit
  while (end > 0 && ((bytes[end] as number) & 0xc0) === 0x80) end -= 1
  return { value: bytes.subarray(0, end).toString("utf8"), truncated: true }
}

/**
 * A new record from a call, its parameters and result each cut to `maxValueBytes` of JSON, and its
 * JSON text. Serialized before anything is kept: a record that cannot be written (arguments or a
 * result nested too deep for JSON.stringify) must not be kept where no page can encode it. One
 * object shape, written once: a text shorter than the result limit holds a result within it.
 */
export const makeRecord = (input: NewRecord, maxValueBytes: number): { readonly record: ToolRecord; readonly line: string } => {
  const id = randomUUID()
  const timestamp = input.timestamp ?? new Date().toISOString()
  const { scope, agent_id, service_name, tool_name, params, outcome, error, duration_ms, trace_id } = input
  const span = input.span_id === undefined ? (input.approval === undefined ? undefined : { approval: input.approval }) : input.approval === undefined ? { span_id: input.span_id } : { span_id: input.span_id, approval: input.approval }
  let record: ToolRecord
  let line: string
  try {
    record = { id, timestamp, scope, agent_id, service_name, tool_name, params, result: input.result, outcome, error, duration_ms, trace_id, ...span }
    line = JSON.stringify(record)
    if (line.length > maxValueBytes / 3) {
      const cutParams = cutValue(params, maxValueBytes)
      const cutResult = cutValue(input.result, maxValueBytes)
      if (cutParams.truncated || cutResult.truncated) {
        record = {
          id,
          timestamp,
          scope,
          agent_id,
          service_name,
          tool_name,
          params: cutParams.value,
          ...(cutParams.truncated ? { params_truncated: true } : {}),
          result: cutResult.value,
          ...(cutResult.truncated ? { result_truncated: true } : {}),
          outcome,
          error,
          duration_ms,
          trace_id,
          ...span
        }
        line = JSON.stringify(record)
      }
    }
  } catch (e) {
    const why = `not recorded: ${e instanceof Error ? e.message : String(e)}`
    record = { id, timestamp, scope, agent_id, service_name, tool_name, params: { unserializable: why }, result: null, outcome, error, duration_ms, trace_id, ...span }
    line = JSON.stringify(record)
  }
  return { record, line }
}

/** The text form of an MCP tool result (docs/api.md, call_tool `result`): a record's `result` too. */
export const resultValue = (r: CallToolResult): unknown => {
  if (r.structuredContent !== undefined) return r.structuredContent
  const content = r.content ?? []
  if (content.length > 0 && content.every((c) => c.type === "text")) {
    const texts = content.map((c) => (c as { text: string }).text)
    return texts.length === 1 ? texts[0] : texts
  }
  return content
}

/** The text a tool gave with `isError`, for a response's message and a record's error. */
export const toolErrorMessage = (output: { readonly content: CallToolResult["content"] }): string => {
  const texts = output.content.filter((c) => c.type === "text").map((c) => (c as { text: string }).text)
  return texts.length > 0 ? texts.join("\n") : "the tool reported an error"
}

/** Whether a record matches a query's filters (not its paging). */
export const matchesQuery = (q: RecordQuery, r: ToolRecord): boolean =>
  (q.scope === undefined || scopeKey(r) === q.scope) &&
  (q.service_name === undefined || r.service_name === q.service_name) &&
  (q.tool_name === undefined || r.tool_name === q.tool_name) &&
  (q.outcome === undefined || r.outcome === q.outcome) &&
  (q.since === undefined || Date.parse(r.timestamp) >= q.since)

/** A record as the aggregates count it. */
export const counted = (r: ToolRecord) => ({
  scope: scopeKey(r),
  service_name: r.service_name,
  tool_name: r.tool_name,
  day: r.timestamp.slice(0, 10),
  failed: isFailedOutcome(r.outcome),
  duration_ms: r.duration_ms
})

/**
 * Where the store keeps its tool-call records: the records file (`ToolRecords`, one store) or the
 * cluster's Redis stream (src/records/redis-records.ts `RedisRecords`, every replica's records). Both
 * give the same answers; figures and the event stream see them through this.
 */
export interface RecordsBackend {
  /** Takes a record; `written` resolves once it is stored (undefined when it already is). */
  record(input: NewRecord): { readonly record: ToolRecord; readonly written: Promise<void> | undefined }
  /** Takes a record; resolves once it is stored. */
  append(input: NewRecord): Promise<ToolRecord>
  /** Records matching the query, newest first, and how many match in all. */
  query(q: RecordQuery): Promise<{ readonly executions: ReadonlyArray<ToolRecord>; readonly total: number }>
  /** Totals over every record of the given scopes (all scopes when undefined). */
  summary(scopes?: ReadonlyArray<string>): ReturnType<RecordTallies["summary"]>
  /** Calls per UTC day for the `days` days ending today, oldest first. */
  daily(days: number, now?: number, narrowing?: { readonly agent_id?: string | undefined; readonly service_name?: string | undefined }): ReturnType<RecordTallies["daily"]>
  /** The newest records kept in memory, oldest first (monitoring figures). */
  inMemory(): ReadonlyArray<ToolRecord>
  /** Called with every new record (of every replica, in a cluster). Returns an unsubscribe. */
  onRecord(listener: (r: ToolRecord) => void): () => void
  /** Called with every record this process took (per-instance metrics). Returns an unsubscribe. */
  onOwnRecord(listener: (r: ToolRecord) => void): () => void
  /** Drops records older than the retention; resolves with how many went. */
  cleanup(): Promise<number>
  /** Stores what is pending and lets go of the file or connection. */
  close(): Promise<void>
}

/** The tool-call record file and its aggregates. Open it with `ToolRecords.open`. */
export class ToolRecords implements RecordsBackend {
  private handle: FileHandle | undefined
  private size = 0
  private recent: ToolRecord[] = []
  private tallies = new RecordTallies()
  /** Appended records not written yet (their lines, each ending in a newline): counted already, so every rebuild counts them again. */
  private pendingRecords: ToolRecord[] = []
  private pendingLines: string[] = []
  private flushing: Promise<void> | undefined
  private queue: Promise<unknown> = Promise.resolve()
  /** File tasks queued or running (`serialize`): while there are any, lines wait for them. */
  private tasks = 0
  private readonly listeners = new Set<(r: ToolRecord) => void>()
  /** A symlink stood at the file's path: nothing is read from or written to it. */
  private refused = false

  private constructor(
    /** The records file. */
    readonly path: string,
    private readonly options: RecordsOptions
  ) {}

  /** Opens (or creates) the records file of the services file (`recordsFileFor`) and rebuilds the aggregates. */
  static async open(servicesFile: string, options: RecordsOptions): Promise<ToolRecords> {
    const records = new ToolRecords(recordsFileFor(servicesFile), options)
    await records.load()
    return records
  }

  private get memoryLimit(): number {
    return this.options.memoryLimit ?? 20_000
  }

  private async load(): Promise<void> {
    const cutoff = this.options.retentionDays < 0 ? -Infinity : Date.now() - this.options.retentionDays * DAY_MS
    const kept: ToolRecord[] = []
    let dropped = 0
    try {
      for await (const line of await this.lines()) {
        if (line.trim() === "") continue
        let r: ToolRecord
        try {
          r = JSON.parse(line) as ToolRecord
        } catch {
          dropped += 1 // a torn last line from a crash: not a record
          continue
        }
        if (Date.parse(r.timestamp) < cutoff) {
          dropped += 1
          continue
        }
        kept.push(r)
      }
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code
      if (code === "ELOOP") return this.refuse()
      if (code !== "ENOENT") throw e
    }
    if (dropped > 0) await this.rewrite(kept)
    this.rebuild(kept)
    try {
      this.handle = await open(this.path, APPEND_FLAGS, 0o600)
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ELOOP") return this.refuse()
      throw e
    }
    const st = await this.handle.stat()
    // A file made before records were private: narrowed to 0600 (a stricter mode is kept).
    if ((st.mode & 0o177) !== 0 && st.uid === process.getuid?.()) await this.handle.chmod(st.mode & 0o600)
    this.size = st.size
    if (this.overLimit()) await this.enforceSize()
  }

  /**
   * A symlink stands where the records file should be: it is not followed (it could make the store
   * read or overwrite another file). Records are kept in memory only, and the refusal is logged.
   */
  private refuse(): void {
    this.refused = true
    log.error(
      `${this.path} is a symbolic link: refused (never followed). Tool-call records are kept in memory ` +
        "only until it is replaced by a regular file and the store restarted.",
      { event: "records_refused", file: this.path }
    )
  }

  /** The file's lines, opened without following a symlink (rejects with ELOOP for one, ENOENT when missing). */
  private async lines(): Promise<AsyncIterable<string>> {
    const handle = await open(this.path, READ_FLAGS)
    return createInterface({ input: handle.createReadStream({ encoding: "utf8" }), crlfDelay: Infinity })
  }

  private rebuild(records: ReadonlyArray<ToolRecord>): void {
    this.tallies = new RecordTallies()
    const all = this.pendingRecords.length > 0 ? [...records, ...this.pendingRecords] : records
    for (const r of all) this.count(r)
    this.recent = all.slice(-this.memoryLimit)
  }

  private count(r: ToolRecord): void {
    this.tallies.count(counted(r))
  }

  /** Rewrites the file with these records only (atomic: temporary file, then rename). */
  private rewrite(records: ReadonlyArray<ToolRecord>): Promise<void> {
    return this.rewriteText(records.map((r) => `${JSON.stringify(r)}\n`).join(""))
  }

  /** Rewrites the file with this text (its lines; atomic: temporary file, then rename). */
  private async rewriteText(text: string | Uint8Array): Promise<void> {
    if (this.refused) return
    await sweptOnce(this.path)
    const tmp = join(dirname(this.path), `.${basename(this.path)}.${process.pid}.${randomUUID().slice(0, 8)}.tmp`)
    // Created new (never an existing file or a symlink), private from the start; the old file's
    // mode is kept where it is stricter.
    const [out, previous] = await Promise.all([open(tmp, "wx", 0o600), stat(this.path).catch(() => undefined)])
    try {
      if (previous !== undefined && (previous.mode & 0o600) !== 0o600) await out.chmod(previous.mode & 0o600)
      await out.writeFile(text)
      await out.sync()
    } finally {
      await out.close()
    }
    const reopen = this.handle !== undefined
    if (reopen) await this.handle?.close()
    try {
      await rename(tmp, this.path)
    } catch (e) {
      await rm(tmp, { force: true })
      throw e
    } finally {
      if (reopen) this.handle = await open(this.path, APPEND_FLAGS, 0o600)
    }
    this.size = (await stat(this.path)).size
  }

  private overLimit(): boolean {
    return this.options.maxFileSizeMb >= 0 && this.size > this.options.maxFileSizeMb * 1024 * 1024
  }

  /** Drops the oldest records until the file is under 80 % of the size limit. */
  private async enforceSize(): Promise<void> {
    if (this.refused) return
    const target = Math.floor(this.options.maxFileSizeMb * 1024 * 1024 * 0.8)
    // The file's bytes as they are: cut at the first line that starts within the last `target`
    // bytes; only the dropped lines are parsed (to take them off the aggregates), the kept ones are
    // written back as they were read. Parsing and writing every record again, at each trim of a full
    // file, cost a busy store 50 to 100 µs a call on average (bench/RESULTS.md, "Records").
    const handle = await open(this.path, READ_FLAGS)
    let bytes: Buffer
    try {
      bytes = await handle.readFile()
    } finally {
      await handle.close()
    }
    if (bytes.length <= target) return
    const newline = bytes.indexOf(10, bytes.length - target - 1)
    const cut = newline === -1 ? bytes.length : newline + 1
    const dropped = bytes.subarray(0, cut).toString("utf8").split("\n")
    for (const line of dropped) {
      if (line.trim() === "") continue
      try {
        this.tallies.uncount(counted(JSON.parse(line) as ToolRecord))
      } catch {
        // a torn line is not a record, and was never counted
      }
    }
    const kept = bytes.subarray(cut)
    await this.rewriteText(kept)
    // The records in memory are the newest of the file's and those waiting to be written.
    let lines = 0
    for (let at = kept.indexOf(10); at !== -1; at = kept.indexOf(10, at + 1)) lines += 1
    const live = lines + this.pendingRecords.length
    if (this.recent.length > live) this.recent = live === 0 ? [] : this.recent.slice(-live)
  }

  private async readAll(): Promise<ToolRecord[]> {
    if (this.refused) return [...this.recent]
    const out: ToolRecord[] = []
    for await (const line of await this.lines()) {
      if (line.trim() === "") continue
      try {
        out.push(JSON.parse(line) as ToolRecord)
      } catch {
        // a torn line is not a record
      }
    }
    return out
  }

  /** Runs file maintenance one at a time with appends. */
  private serialize<A>(task: () => Promise<A>): Promise<A> {
    this.tasks += 1
    const run = this.queue.then(task, task).finally(() => (this.tasks -= 1))
    this.queue = run.catch(() => undefined)
    return run
  }

  /** Appends a record; resolves once its line is written. */
  append(input: NewRecord): Promise<ToolRecord> {
    const { record, written } = this.record(input)
    return written === undefined ? Promise.resolve(record) : written.then(() => record)
  }

  /**
   * Takes a record: counted, kept in memory, given to the listeners, and its line written to the
   * file. When nothing else is writing the file, the line is appended at once and `written` is
   * undefined; otherwise (maintenance of the file, lines already waiting) it waits for them and goes
   * with the others in one write, and `written` resolves once it is in the file. Aggregates are
   * updated at once either way.
   */
  record(input: NewRecord): { readonly record: ToolRecord; readonly written: Promise<void> | undefined } {
    const { record, line } = makeRecord(input, this.options.maxValueBytes ?? DEFAULT_MAX_VALUE_BYTES)
    this.count(record)
    this.recent.push(record)
    if (this.recent.length > this.memoryLimit * 1.25) this.recent = this.recent.slice(-this.memoryLimit)
    for (const l of this.listeners) l(record)
    if (this.tasks > 0 || this.pendingLines.length > 0) {
      this.pendingLines.push(`${line}\n`)
      this.pendingRecords.push(record)
      return { record, written: this.flush() }
    }
    if (this.handle === undefined) return { record, written: undefined }
    try {
      this.appendLines(this.handle, Buffer.from(`${line}\n`, "utf8"))
    } catch (e) {
      return { record, written: Promise.reject(e) }
    }
    // Over the size limit: the oldest records go before this one counts as written.
    return { record, written: this.overLimit() ? this.flush() : undefined }
  }

  /**
   * Appends whole lines. A write that fails part-way (a full disk) is cut back to the last whole
   * line, so that the next line does not join a torn one and both are lost; when even that fails,
   * the next append starts on a new line (the torn one is skipped when the file is read).
   */
  private appendLines(handle: FileHandle, lines: Buffer): void {
    const bytes = this.torn ? Buffer.concat([Buffer.from("\n"), lines]) : lines
    let written = 0
    try {
      while (written < bytes.length) written += writeSync(handle.fd, bytes, written)
    } catch (e) {
      if (written > 0) {
        try {
          ftruncateSync(handle.fd, this.size)
          this.torn = false
        } catch {
          this.size += written
          this.torn = true
        }
      }
      throw e
    }
    this.size += bytes.length
    this.torn = false
  }

  /** A write failed part-way and could not be cut back: the file ends inside a line. */
  private torn = false

  private flush(): Promise<void> {
    this.flushing ??= this.serialize(async () => {
      // Let calls finishing in the same turn join this write.
      await new Promise<void>((r) => setImmediate(r))
      this.flushing = undefined
      const text = this.pendingLines.join("")
      this.pendingLines = []
      this.pendingRecords = []
      if (this.handle === undefined) return
      if (text !== "") {
        // One synchronous write per group: appending to a local file is a copy into the page cache,
        // cheaper than the thread-pool round trip of an asynchronous write (two thread hand-offs).
        this.appendLines(this.handle, Buffer.from(text, "utf8"))
      }
      if (this.overLimit()) await this.enforceSize()
    })
    return this.flushing
  }

  /** Drops records older than the retention (at start and every `cleanup_hours`). */
  cleanup(): Promise<number> {
    return this.serialize(async () => {
      if (this.options.retentionDays < 0) return 0
      const cutoff = Date.now() - this.options.retentionDays * DAY_MS
      const all = await this.readAll()
      const kept = all.filter((r) => Date.parse(r.timestamp) >= cutoff)
      if (kept.length === all.length) return 0
      await this.rewrite(kept)
      this.rebuild(kept)
      return all.length - kept.length
    })
  }

  /** Records matching the query, newest first, and how many match in all (in memory or only in the file). */
  async query(q: RecordQuery): Promise<{ readonly executions: ReadonlyArray<ToolRecord>; readonly total: number }> {
    const offset = q.offset ?? 0
    const limit = q.limit ?? 50
    const matches = (r: ToolRecord) => matchesQuery(q, r)
    const found: ToolRecord[] = []
    for (let i = this.recent.length - 1; i >= 0; i--) if (matches(this.recent[i] as ToolRecord)) found.push(this.recent[i] as ToolRecord)
    const complete = this.recent.length >= this.recordCount()
    // Older records than the in-memory window are only in the file. Their count comes from the
    // aggregates when the filter allows it; the file is read only for a page past the window, or to
    // count an `outcome` / `since` filter.
    const fromTallies = q.outcome === undefined && q.since === undefined ? this.tallies.countMatching(q) : undefined
    if (complete || (offset + limit <= found.length && fromTallies !== undefined)) {
      return { executions: found.slice(offset, offset + limit), total: complete ? found.length : (fromTallies as number) }
    }
    await this.flush()
    const keep = offset + limit
    let newest: ToolRecord[] = []
    let total = 0
    await this.serialize(async () => {
      for (const r of await this.readAll()) {
        if (!matches(r)) continue
        total += 1
        newest.push(r)
        if (newest.length > 2 * keep + 1_000) newest = newest.slice(-keep)
      }
    })
    return { executions: newest.slice(-keep).reverse().slice(offset, offset + limit), total }
  }

  /** How many records there are (file and pending), from the aggregates. */
  private recordCount(): number {
    return this.tallies.total()
  }

  /** Every record in memory, oldest first (for monitoring figures). */
  inMemory(): ReadonlyArray<ToolRecord> {
    return this.recent
  }

  /** Totals over every record of the given scopes (all scopes when undefined). */
  summary(scopes?: ReadonlyArray<string>) {
    return this.tallies.summary(scopes)
  }

  /**
   * Calls per UTC day for the `days` days ending today, oldest first, a row for every day; only
   * those of scope `agent_id` ("store" or an agent id) and service `service_name` when given.
   */
  daily(days: number, now = Date.now(), narrowing: { readonly agent_id?: string | undefined; readonly service_name?: string | undefined } = {}) {
    return this.tallies.daily(days, now, narrowing)
  }

  /** Called with every new record (monitoring, event stream). Returns an unsubscribe. */
  onRecord(listener: (r: ToolRecord) => void): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  /** The same as `onRecord`: one process takes every record of its file. */
  onOwnRecord(listener: (r: ToolRecord) => void): () => void {
    return this.onRecord(listener)
  }

  /** Writes what is pending and closes the file. */
  async close(): Promise<void> {
    await this.flush()
    await this.queue
    await this.handle?.close()
    this.handle = undefined
  }
}
