/**
 * Asynchronous calls of a cluster of replicas in its Redis (the `AsyncResultsBackend` of replica
 * mode; the file's counterpart is src/records/async-results.ts), so that any replica answers a
 * call's status whichever replica runs it:
 *
 * - each call is one key, `async:<call id>`, holding its entry as JSON: set when it starts, again
 *   with its latest progress (at most once a second, src/runtime/async-calls.ts) and when it ends,
 *   then with the retention as its expiry;
 * - the finished ones are also in a sorted set by their end, `async-finished`, with their answers'
 *   sizes in a hash, `async-sizes`: one script keeps them within the count and the bytes (the
 *   oldest dropped with their keys) each time a call ends;
 * - a running call names the replica that runs it: a replica that is gone (its registry entry
 *   expired, docs/replicas.md) no longer runs it, so a reader sees it `interrupted`, and the first
 *   reader to see it so keeps it so and records it once (`SET NX` of a marker).
 */
import type { Redis } from "../redis/connection.js"
import { clusterKey } from "../redis/key-names.js"
import { answerBytes, ended, type AsyncCallEntry, type AsyncProgress, type AsyncResultsBackend, type AsyncResultsOptions } from "./async-results.js"
import type { ClusterData } from "./redis-records.js"

/**
 * Ends a call: its entry with its expiry, indexed by its end, its answer's size noted; then the
 * finished calls ended before the retention are forgotten, and the oldest dropped with their keys
 * while more are kept than the count or their answers together pass the bytes (as the file does).
 */
const FINISH = `
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
redis.call('HSET', KEYS[3], ARGV[4], ARGV[7])
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[3] - ARGV[2])) do
  redis.call('ZREM', KEYS[2], id)
  redis.call('HDEL', KEYS[3], id)
end
local bytes = 0
for _, size in ipairs(redis.call('HVALS', KEYS[3])) do bytes = bytes + tonumber(size) end
local count = redis.call('ZCARD', KEYS[2])
local dropped = 0
while count > 0 and (count > tonumber(ARGV[5]) or bytes > tonumber(ARGV[8])) do
  local id = redis.call('ZPOPMIN', KEYS[2])[1]
  bytes = bytes - tonumber(redis.call('HGET', KEYS[3], id) or '0')
  redis.call('HDEL', KEYS[3], id)
  redis.call('DEL', ARGV[6] .. id)
  count = count - 1
  dropped = dropped + 1
end
return dropped
`

/** A running call's entry lives at most this long without an update (its replica renews it with its progress and end). */
const RUNNING_TTL_MS = 7 * 86_400_000

/** What the Redis backend needs beyond the cluster's client: whether a replica still runs. */
export interface ReplicaLiveness {
  readonly alive: (replicaId: string) => Promise<boolean>
}

export class RedisAsyncResults implements AsyncResultsBackend {
  /** The running calls of this replica (their entries, to write their progress). */
  private readonly running = new Map<string, AsyncCallEntry>()
  private readonly prefix: string
  private readonly finishedKey: string
  private readonly sizesKey: string
  private finishedSeen = 0
  /** Calls of gone replicas found by reads, to be recorded once by this replica. */
  private interrupted: Array<AsyncCallEntry> = []

  constructor(
    private readonly data: ClusterData,
    private readonly options: AsyncResultsOptions,
    private readonly liveness: ReplicaLiveness
  ) {
    this.prefix = `${clusterKey(data.cluster, "async")}:`
    this.finishedKey = clusterKey(data.cluster, "async-finished")
    this.sizesKey = clusterKey(data.cluster, "async-sizes")
  }

  private get client(): Redis {
    return this.data.client
  }

  private write(entry: AsyncCallEntry): Promise<unknown> {
    return this.client.set(this.prefix + entry.call_id, JSON.stringify(entry), { expiration: { type: "PX", value: RUNNING_TTL_MS } })
  }

  async start(entry: AsyncCallEntry): Promise<void> {
    this.running.set(entry.call_id, entry)
    try {
      await this.write(entry)
    } catch (e) {
      // Not kept: the call does not start.
      this.running.delete(entry.call_id)
      throw e
    }
  }

  progress(callId: string, progress: AsyncProgress): void {
    const entry = this.running.get(callId)
    if (entry === undefined) return
    const next = { ...entry, progress }
    this.running.set(callId, next)
    void this.write(next).catch(() => undefined)
  }

  target(callId: string, target: { readonly service_name: string; readonly original_name: string; readonly trace_id: string }): void {
    const entry = this.running.get(callId)
    if (entry === undefined) return
    const next = { ...entry, ...target }
    this.running.set(callId, next)
    void this.write(next).catch(() => undefined)
  }

  task(callId: string, taskId: string): void {
    const entry = this.running.get(callId)
    if (entry === undefined) return
    const next = { ...entry, upstream_task: taskId }
    this.running.set(callId, next)
    void this.write(next).catch(() => undefined)
  }

  async finish(entry: AsyncCallEntry): Promise<void> {
    this.running.delete(entry.call_id)
    const kept = ended(entry)
    const retentionMs = Math.max(1, this.options.retentionSeconds * 1000)
    const end = Date.parse(kept.ended_at ?? new Date().toISOString())
    await this.client.eval(FINISH, {
      keys: [this.prefix + kept.call_id, this.finishedKey, this.sizesKey],
      arguments: [JSON.stringify(kept), String(retentionMs), String(end), kept.call_id, String(this.options.maxFinished), this.prefix, String(answerBytes(kept)), String(this.options.maxBytes)]
    })
    this.finishedSeen += 1
  }

  async get(callId: string): Promise<AsyncCallEntry | undefined> {
    const text = await this.client.get(this.prefix + callId)
    if (text === null) return undefined
    let entry: AsyncCallEntry
    try {
      entry = JSON.parse(text) as AsyncCallEntry
    } catch {
      return undefined
    }
    if (entry.status !== "running" || entry.replica === undefined || this.running.has(callId)) return entry
    if (await this.liveness.alive(entry.replica)) return entry
    // Its replica is gone: the call no longer runs anywhere.
    const interrupted: AsyncCallEntry = { ...entry, status: "interrupted", error: "the replica that ran the call stopped", answer: null, ended_at: new Date().toISOString() }
    const first = await this.client.set(`${this.prefix + callId}:interrupted`, "1", { condition: "NX", expiration: { type: "PX", value: RUNNING_TTL_MS } })
    if (first !== null) {
      this.interrupted.push(interrupted)
      await this.finish(interrupted)
    }
    return ended(interrupted)
  }

  /** A reader that finds a gone replica's call keeps it interrupted at once (`get`): nothing waits here. */
  settled(_callId: string): void {}

  takeInterrupted(): Promise<ReadonlyArray<AsyncCallEntry>> {
    const taken = this.interrupted
    this.interrupted = []
    return Promise.resolve(taken)
  }

  finishedCount(): number {
    return this.finishedSeen
  }

  close(): Promise<void> {
    return Promise.resolve()
  }
}
