/**
 * The tool-call records of a cluster of replicas (docs/replicas-data.md): every replica's records in
 * one capped Redis Stream, `records`, with their aggregates in a hash, `records:counts`, so that
 * queries, summaries, daily figures and the event stream of any replica cover the whole cluster.
 * It answers as the records file does (`RecordsBackend`, src/records/tool-records.ts): the same record
 * shape and value cut (`makeRecord`), the same aggregates (src/records/aggregates.ts).
 *
 * - Writing is one Lua script (atomic, like a MULTI, but it can also read what it drops): XADD, the
 *   counts of the record's groups, then the oldest entries dropped while the stream is over its
 *   caps (entries, bytes) or older than the retention, their counts taken back, at most
 *   `TRIM_BUDGET` per call. Trimming in the script rather than by XADD's MAXLEN / MINID keeps the
 *   counts equal to what the stream holds, as the file's are; the caps are those of MAXLEN ~ and
 *   MINID: `maxLen` = the file's size limit / `TYPICAL_RECORD_BYTES`, and the file's byte limit.
 * - Reading: each replica follows the stream with XREAD BLOCK on its own duplicated connection (not
 *   pub/sub: a reader that was disconnected resumes from its last id and misses nothing, and the
 *   record is written once). What it reads updates its copy of the aggregates and its window of the
 *   newest records, and is given to `onRecord` listeners: records of every replica. A replica's
 *   copy is rebuilt from the counts hash (one script: hash and stream position at one instant)
 *   when it drifts from the hash's total, which trims by other replicas cause; at most once a second.
 * - A record counts as written once this replica's reader has read it back (a few milliseconds
 *   while Redis answers), so a summary or a query right after a call sees it, as with the file; but
 *   a call waits for that at most `CALL_WAIT_MS`, and not at all while writes fail: a call never
 *   waits long on a Redis that is hung or away (its record waits in the buffer).
 * - Records go through a bounded buffer, written in batches by one writer at a time. A batch not
 *   answered (Redis hung or away) is sent again, with the same number, until Redis answers: the
 *   script skips a batch number it already wrote, so a copy Redis runs late is not written twice.
 *   When the buffer is full (`BUFFER_LIMIT` records: Redis away for long under load) the oldest
 *   records are dropped, with a warning line when it starts and one with the count when it ends:
 *   calls go on, and the records of the most recent calls are the ones kept.
 */
import { randomUUID } from "node:crypto"
import type { Redis } from "../redis/connection.js"
import { clusterKey } from "../redis/key-names.js"
import { followStream, type StreamEntry, type StreamFollower } from "../redis/stream-follower.js"
import { RecordTallies } from "./aggregates.js"
import {
  counted,
  DEFAULT_MAX_VALUE_BYTES,
  isFailedOutcome,
  makeRecord,
  matchesQuery,
  scopeKey,
  type NewRecord,
  type RecordQuery,
  type RecordsBackend,
  type RecordsOptions,
  type ToolRecord
} from "./tool-records.js"
import { log } from "../logging/log.js"

/** What every cluster data backend is made from: the store's client and the cluster's name. */
export interface ClusterData {
  readonly client: Redis
  readonly cluster: string
}

/**
 * The size of a typical record (a call with small arguments and result: about 300 to 600 bytes of
 * JSON): the stream's entry cap is the file's byte limit divided by it, so a flood of tiny records
 * cannot hold more entries than the file would hold lines of typical ones.
 */
export const TYPICAL_RECORD_BYTES = 512
/** At most this many entries are dropped by one write (the script stays short; the next catches up). */
const TRIM_BUDGET = 1000
/** Entries per XREVRANGE page of a query. */
const PAGE = 500
/** A replica's aggregates are rebuilt from the hash at most this often. */
const RESYNC_MS = 1000
/** A record's timestamp comes from its replica's clock, its stream id from Redis's: a query's `since` scans this much further. */
const CLOCK_SLACK_MS = 3_600_000
const DAY_MS = 86_400_000
/** Records waiting to be written, at most; past it the oldest are dropped (with a warning line). */
export const BUFFER_LIMIT = 10_000
/** Records per write. */
const FLUSH_BATCH = 200
/**
 * Written batches waiting for this replica's reader to read them back, at most: past it the oldest
 * is let go (its callers were told long since, `CALL_WAIT_MS` and `WRITE_WAIT_MS` at most), so a
 * reader that stalls while writes go on holds no more.
 */
export const READ_BACK_LIMIT = 1_000
/** A write not answered is sent again after this long (ms). */
const RETRY_MS = 500
/** `append` waits at most this long (ms) for its record to be read back. */
const WRITE_WAIT_MS = 1000
/** A call waits at most this long (ms) for its record to be read back, then is answered anyway. */
const CALL_WAIT_MS = 200
/** How long Redis keeps a writer's last batch number (ms). */
const WRITER_TTL_MS = DAY_MS

/** The group counts and the trimming, shared by both scripts (Lua; `\0` separates names). */
const LUA_COMMON = `
local function num(x) return tonumber(x) or 0 end
-- One group's count, failures and duration sum (fields <c|e|d>\\0<key>), dropped when the count reaches 0.
local function group(h, c, e, dd, k, f, d, sign)
  if redis.call("HINCRBY", h, c .. k, sign) <= 0 then
    redis.call("HDEL", h, c .. k, e .. k, dd .. k)
  else
    if f ~= 0 then redis.call("HINCRBY", h, e .. k, sign) end
    redis.call("HINCRBYFLOAT", h, dd .. k, sign * d)
  end
end
local function bump(h, s, v, t, y, f, d, n, sign)
  group(h, "c\\0", "e\\0", "d\\0", s .. "\\0" .. v .. "\\0" .. t, f, d, sign)
  group(h, "C\\0", "E\\0", "D\\0", y .. "\\0" .. s .. "\\0" .. v, f, d, sign)
  redis.call("HINCRBY", h, "N", sign)
  redis.call("HINCRBY", h, "B", sign * n)
end
-- Drops the oldest entries while over a cap or past the retention, never "keep"; returns how many.
-- The oldest entry is read alone first: most writes drop nothing, and a page of 100 entries (their
-- fields copied into Lua tables) costs Redis several times what the write itself does.
local function trim(stream, h, maxLen, maxBytes, minMs, keep)
  local dropped = 0
  local count = 1
  while dropped < ${TRIM_BUDGET} do
    local page = redis.call("XRANGE", stream, "-", "+", "COUNT", count)
    count = 100
    if #page == 0 then return dropped end
    for _, entry in ipairs(page) do
      if entry[1] == keep or dropped >= ${TRIM_BUDGET} then return dropped end
      local f = {}
      for i = 1, #entry[2], 2 do f[entry[2][i]] = entry[2][i + 1] end
      local over = (maxLen >= 0 and redis.call("XLEN", stream) > maxLen)
        or (maxBytes >= 0 and num(redis.call("HGET", h, "B")) > maxBytes)
        or (minMs >= 0 and num(f.m) < minMs)
      if not over then return dropped end
      bump(h, f.s, f.v, f.t, f.y, num(f.f), num(f.d), num(f.n), -1)
      redis.call("XDEL", stream, entry[1])
      dropped = dropped + 1
    end
  end
  return dropped
end
`

/** Fields per record in `APPEND`'s arguments. */
const ENTRY_FIELDS = 9
/**
 * KEYS: stream, counts, the writer's last batch number. ARGV: maxLen, maxBytes, minMs, batch
 * number, then the entries (s v t y f d n m r each). Returns the entries' ids; none when that
 * batch (or a later one) of this writer was written already.
 */
const APPEND = `${LUA_COMMON}
local seq = tonumber(ARGV[4])
if tonumber(redis.call("GET", KEYS[3]) or "0") >= seq then return {} end
local ids = {}
for a = 5, #ARGV, ${ENTRY_FIELDS} do
  ids[#ids + 1] = redis.call("XADD", KEYS[1], "*", "s", ARGV[a], "v", ARGV[a + 1], "t", ARGV[a + 2], "y", ARGV[a + 3], "f", ARGV[a + 4], "d", ARGV[a + 5], "n", ARGV[a + 6], "m", ARGV[a + 7], "r", ARGV[a + 8])
  bump(KEYS[2], ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), 1)
end
redis.call("SET", KEYS[3], ARGV[4], "PX", "${WRITER_TTL_MS}")
trim(KEYS[1], KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ids[#ids])
return ids
`
/** KEYS: stream, counts. ARGV: maxLen, maxBytes, minMs. Returns how many entries went. */
const TRIM = `${LUA_COMMON}
return trim(KEYS[1], KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), "")
`
/** KEYS: stream, counts. Returns the last id, the first id and the counts, at one instant. */
const SNAPSHOT = `
local last = redis.call("XREVRANGE", KEYS[1], "+", "-", "COUNT", 1)[1]
local first = redis.call("XRANGE", KEYS[1], "-", "+", "COUNT", 1)[1]
return { last and last[1] or "0-0", first and first[1] or "0-0", redis.call("HGETALL", KEYS[2]) }
`

/** Stream ids compared (`<ms>-<seq>`). */
export const compareIds = (a: string, b: string): number => {
  const [am, as] = a.split("-").map(Number) as [number, number]
  const [bm, bs] = b.split("-").map(Number) as [number, number]
  return am !== bm ? am - bm : as - bs
}

type Entry = StreamEntry

/** A record waiting to be written: its script arguments, and what to tell once it is read back. */
interface Pending {
  readonly entry: ReadonlyArray<string>
  readonly done: () => void
}

const CLOSED = (): Error => new Error("the cluster's records are closed")

/** The counts hash as aggregates. */
const talliesOf = (flat: ReadonlyArray<string>): RecordTallies => {
  const fields = new Map<string, string>()
  for (let i = 0; i + 1 < flat.length; i += 2) fields.set(flat[i] as string, flat[i + 1] as string)
  const tallies = new RecordTallies()
  for (const [field, value] of fields) {
    const kind = field[0]
    if (kind !== "c" && kind !== "C") continue
    const rest = field.slice(2)
    const errors = Number(fields.get(`${kind === "c" ? "e" : "E"}\u0000${rest}`) ?? 0)
    const durationMs = Number(fields.get(`${kind === "c" ? "d" : "D"}\u0000${rest}`) ?? 0)
    const t = { count: Number(value), errors, durationMs }
    const [a, b, c] = rest.split("\u0000") as [string, string, string]
    if (kind === "c") tallies.addTool(a, b, c, t)
    else tallies.addDay(a, b, c, t)
  }
  return tallies
}

/** The records of a cluster. Open it with `RedisRecords.open`. */
export class RedisRecords implements RecordsBackend {
  private readonly stream: string
  private readonly counts: string
  private tallies = new RecordTallies()
  /** The newest records read, oldest first, and their stream ids. */
  private recent: ToolRecord[] = []
  private recentIds: string[] = []
  /** Where the reader is: the last id read (or skipped by a rebuild). */
  private cursor = "0-0"
  private readonly listeners = new Set<(r: ToolRecord) => void>()
  private readonly ownListeners = new Set<(r: ToolRecord) => void>()
  /** Writes waiting for the reader to pass their id (at most `READ_BACK_LIMIT`, the oldest first). */
  private readonly waiting = new Map<string, () => void>()
  /** Records not sent yet, oldest first (at most `BUFFER_LIMIT`). */
  private buffer: Pending[] = []
  /** The batch being written (sent again, with the same number, until Redis answers). */
  private batch: { readonly seq: number; readonly items: ReadonlyArray<Pending> } | undefined
  private seq = 0
  private flushing: Promise<void> | undefined
  private retryTimer: NodeJS.Timeout | undefined
  private wakeRetry: (() => void) | undefined
  /** The last write failed (Redis hung or away): calls are not held for their records. */
  private stalled = false
  /** Records dropped from a full buffer since it last overflowed. */
  private dropped = 0
  /** This process's writer key (its last batch number in Redis). */
  private readonly writer: string
  private follower: StreamFollower | undefined
  private resyncTimer: NodeJS.Timeout | undefined
  private lastResync = 0
  private closed = false

  private constructor(
    private readonly data: ClusterData,
    private readonly options: RecordsOptions
  ) {
    this.stream = clusterKey(data.cluster, "records")
    this.counts = clusterKey(data.cluster, "records", "counts")
    this.writer = clusterKey(data.cluster, "records", "writer", randomUUID())
  }

  /** Follows the cluster's records (drops those past the retention first). */
  static async open(data: ClusterData, options: RecordsOptions): Promise<RedisRecords> {
    const records = new RedisRecords(data, options)
    await records.cleanup()
    await records.resync()
    await records.loadRecent()
    records.follower = await followStream(data.client, records.stream, () => records.cursor, (entries) => records.take(entries), "tool-call records")
    return records
  }

  private get memoryLimit(): number {
    return this.options.memoryLimit ?? 20_000
  }

  /** The caps as the scripts take them: entries, bytes, oldest timestamp kept (-1: none). */
  private caps(): [string, string, string] {
    const bytes = this.options.maxFileSizeMb < 0 ? -1 : Math.floor(this.options.maxFileSizeMb * 1024 * 1024)
    const maxLen = bytes < 0 ? -1 : Math.max(1, Math.floor(bytes / TYPICAL_RECORD_BYTES))
    const minMs = this.options.retentionDays < 0 ? -1 : Date.now() - this.options.retentionDays * DAY_MS
    return [String(maxLen), String(bytes), String(minMs)]
  }

  /** The aggregates from the hash, and the reader moved past what they count. */
  private async resync(): Promise<void> {
    this.lastResync = Date.now()
    const [last, first, flat] = (await this.data.client.eval(SNAPSHOT, { keys: [this.stream, this.counts] })) as [string, string, string[]]
    this.tallies = talliesOf(flat)
    if (compareIds(last, this.cursor) > 0) this.cursor = last
    // Records trimmed since they were read leave the window.
    let drop = first === "0-0" ? this.recentIds.length : 0 // an empty stream holds none of them
    while (drop < this.recentIds.length && compareIds(this.recentIds[drop] as string, first) < 0) drop += 1
    if (drop > 0) {
      this.recent = this.recent.slice(drop)
      this.recentIds = this.recentIds.slice(drop)
    }
    this.release()
  }

  /** The window of newest records, read newest first in pages. */
  private async loadRecent(): Promise<void> {
    const records: ToolRecord[] = []
    const ids: string[] = []
    let end = this.cursor
    let inclusive = true
    while (records.length < this.memoryLimit && end !== "0-0") {
      const page = (await this.data.client.xRevRange(this.stream, inclusive ? end : `(${end}`, "-", { COUNT: Math.min(PAGE, this.memoryLimit - records.length) })) as Entry[]
      if (page.length === 0) break
      for (const e of page) {
        const r = this.parse(e)
        if (r !== undefined) {
          records.push(r)
          ids.push(e.id)
        }
      }
      end = (page[page.length - 1] as Entry).id
      inclusive = false
    }
    this.recent = records.reverse()
    this.recentIds = ids.reverse()
  }

  private parse(e: Entry): ToolRecord | undefined {
    try {
      return JSON.parse(e.message["r"] ?? "") as ToolRecord
    } catch {
      return undefined
    }
  }

  /** Takes what the reader read: every replica's records, in order. */
  private async take(entries: ReadonlyArray<Entry>): Promise<void> {
    for (const e of entries) {
      if (compareIds(e.id, this.cursor) <= 0) continue
      this.cursor = e.id
      const r = this.parse(e)
      if (r === undefined) continue
      this.tallies.count(counted(r))
      this.recent.push(r)
      this.recentIds.push(e.id)
      for (const l of this.listeners) l(r)
    }
    if (this.recent.length > this.memoryLimit * 1.25) {
      this.recent = this.recent.slice(-this.memoryLimit)
      this.recentIds = this.recentIds.slice(-this.memoryLimit)
    }
    this.release()
    if (entries.length > 0) await this.checkDrift()
  }

  /** Writes whose id the reader passed are written. */
  private release(): void {
    for (const [id, done] of this.waiting) {
      if (compareIds(id, this.cursor) <= 0) {
        this.waiting.delete(id)
        done()
      }
    }
  }

  /** Rebuilds the aggregates when other replicas' trims made them drift (at most once a second). */
  private async checkDrift(): Promise<void> {
    const total = Number((await this.data.client.hGet(this.counts, "N").catch(() => null)) ?? 0)
    if (total === this.tallies.total() || this.resyncTimer !== undefined || this.closed) return
    const wait = Math.max(0, this.lastResync + RESYNC_MS - Date.now())
    this.resyncTimer = setTimeout(() => {
      this.resyncTimer = undefined
      if (!this.closed) void this.resync().catch((e: unknown) => log.warn(`rebuilding the cluster's record counts failed: ${e instanceof Error ? e.message : String(e)}`, { event: "cluster_records_resync_failed" }))
    }, wait)
    this.resyncTimer.unref()
  }

  /**
   * Takes a record and resolves once this replica's reader has read it back, or after
   * `WRITE_WAIT_MS`, or at once while writes fail (tests and tools that want to read it next).
   */
  append(input: NewRecord): Promise<ToolRecord> {
    const { record, written } = this.buffered(input, WRITE_WAIT_MS)
    return written.then(() => record)
  }

  /**
   * Takes a call's record: into the bounded buffer, written to the stream by the writer, and shown
   * (queries, summaries, every replica's listeners) once read back. `written` resolves once this
   * replica's reader has read it back (a few milliseconds while Redis answers, so a query right
   * after the call sees it, as with the file), but after `CALL_WAIT_MS` at most, and at once while
   * writes fail: a call never waits long on a Redis that is hung and not yet known to be (the record
   * waits in the buffer and is written when Redis answers again).
   */
  record(input: NewRecord): { readonly record: ToolRecord; readonly written: Promise<void> } {
    return this.buffered(input, CALL_WAIT_MS)
  }

  /** Buffers a record; `written` as `record` says, waiting `ms` at most. */
  private buffered(input: NewRecord, ms: number): { readonly record: ToolRecord; readonly written: Promise<void> } {
    let readBack!: () => void
    const written = new Promise<void>((resolve) => (readBack = resolve))
    const { record, taken } = this.enqueue(input, readBack)
    if (!taken) return { record, written: Promise.reject(CLOSED()) }
    if (this.stalled) readBack()
    else {
      const timer = setTimeout(readBack, ms)
      timer.unref()
      void written.then(() => clearTimeout(timer))
    }
    return { record, written }
  }

  /** Buffers a record for the writer (`done` told once it is read back, dropped or given up); not once closed. */
  private enqueue(input: NewRecord, done: () => void): { readonly record: ToolRecord; readonly taken: boolean } {
    const { record, line } = makeRecord(input, this.options.maxValueBytes ?? DEFAULT_MAX_VALUE_BYTES)
    for (const l of this.ownListeners) l(record)
    if (this.closed) return { record, taken: false }
    const entry = [
      scopeKey(record),
      record.service_name,
      record.tool_name,
      record.timestamp.slice(0, 10),
      isFailedOutcome(record.outcome) ? "1" : "0",
      String(record.duration_ms),
      String(Buffer.byteLength(line) + 1),
      String(Date.parse(record.timestamp)),
      line
    ]
    if (this.buffer.length >= BUFFER_LIMIT) this.drop()
    this.buffer.push({ entry, done })
    this.flush()
    return { record, taken: true }
  }

  /** The oldest buffered record goes (the buffer is full). */
  private drop(): void {
    this.buffer.shift()?.done()
    if (this.dropped++ === 0) {
      log.warn(`the cluster's Redis has not taken tool-call records for a while: ${BUFFER_LIMIT} are waiting, the oldest are dropped until it does`, {
        event: "cluster_records_dropped"
      })
    }
  }

  /** Starts the writer unless it runs. */
  private flush(): void {
    if (this.flushing !== undefined) return
    this.flushing = this.writeAll().finally(() => {
      this.flushing = undefined
      if (this.buffer.length > 0 && !this.closed) this.flush()
    })
  }

  /** Writes the buffer, a batch at a time; a batch not answered is sent again (same number) until it is. */
  private async writeAll(): Promise<void> {
    while (!this.closed) {
      if (this.batch === undefined) {
        if (this.buffer.length === 0) return
        this.batch = { seq: ++this.seq, items: this.buffer.splice(0, FLUSH_BATCH) }
      }
      const { seq, items } = this.batch
      try {
        const ids = (await this.data.client.eval(APPEND, {
          keys: [this.stream, this.counts, this.writer],
          arguments: [...this.caps(), String(seq), ...items.flatMap((p) => p.entry)]
        })) as string[]
        this.batch = undefined
        if (this.stalled || this.dropped > 0) {
          log.info(`the cluster's Redis takes tool-call records again${this.dropped > 0 ? `; ${this.dropped} were dropped meanwhile (buffer full)` : ""}`, {
            event: "cluster_records_resumed",
            dropped: this.dropped
          })
        }
        this.stalled = false
        this.dropped = 0
        const last = ids[ids.length - 1]
        // Only the callbacks are kept, not the records' text.
        const dones = items.map((p) => p.done)
        const done = () => {
          for (const d of dones) d()
        }
        if (last === undefined || compareIds(last, this.cursor) <= 0) done()
        else {
          this.waiting.set(last, done)
          if (this.waiting.size > READ_BACK_LIMIT) {
            const [oldest, release] = this.waiting.entries().next().value as [string, () => void]
            this.waiting.delete(oldest)
            release()
          }
        }
      } catch (e) {
        if (this.closed) return
        if (!this.stalled) {
          log.warn(`tool-call records could not be written to the cluster's Redis (${e instanceof Error ? e.message : String(e)}): kept (up to ${BUFFER_LIMIT}) and written when it answers`, {
            event: "cluster_records_stalled"
          })
        }
        this.stalled = true
        for (const p of items) p.done()
        for (const p of this.buffer) p.done()
        await new Promise<void>((resolve) => {
          this.wakeRetry = resolve
          this.retryTimer = setTimeout(resolve, RETRY_MS)
          this.retryTimer.unref()
        })
      }
    }
  }

  /** Drops records past the retention (and over the caps); resolves with how many went. */
  async cleanup(): Promise<number> {
    let total = 0
    for (;;) {
      const n = Number(await this.data.client.eval(TRIM, { keys: [this.stream, this.counts], arguments: this.caps() }))
      total += n
      if (n < TRIM_BUDGET) break
    }
    // The dropped records leave this replica's aggregates and window (other replicas: by their drift check).
    if (total > 0) await this.resync()
    return total
  }

  /** Records matching the query, newest first, and how many match in all: from the window, else XREVRANGE pages. */
  async query(q: RecordQuery): Promise<{ readonly executions: ReadonlyArray<ToolRecord>; readonly total: number }> {
    const offset = q.offset ?? 0
    const limit = q.limit ?? 50
    const keep = offset + limit
    const found: ToolRecord[] = []
    for (let i = this.recent.length - 1; i >= 0; i--) if (matchesQuery(q, this.recent[i] as ToolRecord)) found.push(this.recent[i] as ToolRecord)
    const complete = this.recent.length >= this.tallies.total()
    const fromTallies = q.outcome === undefined && q.since === undefined ? this.tallies.countMatching(q) : undefined
    if (complete || (keep <= found.length && fromTallies !== undefined)) {
      return { executions: found.slice(offset, keep), total: complete ? found.length : (fromTallies as number) }
    }
    // Past the window: the stream, newest first, a page at a time; only `keep` records are held.
    const newest: ToolRecord[] = []
    let total = 0
    let end = "+"
    const stop = q.since === undefined ? "-" : `${Math.max(0, q.since - CLOCK_SLACK_MS)}`
    try {
      for (;;) {
        const page = (await this.data.client.xRevRange(this.stream, end, stop, { COUNT: PAGE })) as Entry[]
        for (const e of page) {
          const r = this.parse(e)
          if (r === undefined || !matchesQuery(q, r)) continue
          total += 1
          if (newest.length < keep) newest.push(r)
        }
        if (page.length < PAGE || (fromTallies !== undefined && newest.length >= keep)) break
        end = `(${(page[page.length - 1] as Entry).id}`
      }
    } catch (e) {
      // Redis hung or away: what this replica holds (the newest records), rather than no answer.
      log.warn(`the cluster's records could not be read past this replica's window (${e instanceof Error ? e.message : String(e)}): answered from the window`, {
        event: "cluster_records_read_failed"
      })
      return { executions: found.slice(offset, keep), total: fromTallies ?? found.length }
    }
    return { executions: newest.slice(offset, keep), total: fromTallies ?? total }
  }

  summary(scopes?: ReadonlyArray<string>) {
    return this.tallies.summary(scopes)
  }

  daily(days: number, now = Date.now(), narrowing: { readonly agent_id?: string | undefined; readonly service_name?: string | undefined } = {}) {
    return this.tallies.daily(days, now, narrowing)
  }

  inMemory(): ReadonlyArray<ToolRecord> {
    return this.recent
  }

  /** Every replica's records, as this replica reads them from the stream. */
  onRecord(listener: (r: ToolRecord) => void): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  /** This replica's records only, as it takes them (per-instance metrics: Prometheus sums the replicas). */
  onOwnRecord(listener: (r: ToolRecord) => void): () => void {
    this.ownListeners.add(listener)
    return () => this.ownListeners.delete(listener)
  }

  /** Written batches this replica's reader has not read back yet (for tests of the bound). */
  get readBacksWaiting(): number {
    return this.waiting.size
  }

  /** Waits (up to 2 s) for the buffer to be written, then stops the reader (the store's client stays open: it is the store's). */
  async close(): Promise<void> {
    const limit = Date.now() + 2_000
    while ((this.buffer.length > 0 || this.batch !== undefined) && !this.stalled && Date.now() < limit) {
      await Promise.race([this.flushing, new Promise((r) => setTimeout(r, 50).unref())])
    }
    if (this.buffer.length > 0 || this.batch !== undefined) {
      log.warn(`the cluster's records closed with ${this.buffer.length + (this.batch?.items.length ?? 0)} tool-call record(s) not written (Redis did not answer)`, {
        event: "cluster_records_lost"
      })
    }
    this.closed = true
    clearTimeout(this.retryTimer)
    this.wakeRetry?.()
    for (const p of [...(this.batch?.items ?? []), ...this.buffer]) p.done()
    this.batch = undefined
    this.buffer = []
    if (this.resyncTimer !== undefined) clearTimeout(this.resyncTimer)
    this.resyncTimer = undefined
    for (const done of this.waiting.values()) done()
    this.waiting.clear()
    await this.follower?.close()
    this.listeners.clear()
    this.ownListeners.clear()
  }
}
