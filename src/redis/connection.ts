/**
 * The replica's connections to the cluster's Redis (docs/replicas.md): one client for commands and
 * one duplicate for the blocking stream reads, both reconnecting on their own with a capped backoff.
 * Commands are never queued while Redis is away (`disableOfflineQueue`): a change made then fails
 * at once as `ClusterUnavailable` (503) instead of hanging. The loss and the return of Redis are one
 * log line each, not one per failed reconnection attempt, and listeners are told of the return (the
 * replica reconciles then, src/config/redis-definitions.ts).
 *
 * A hung Redis (a frozen process, a black-holed network) closes nothing, and node-redis times a
 * command out only while it is still unsent. So every command of `client` has a time-out of its own
 * (`COMMAND_TIMEOUT_MS`, a proxy over the client), a command is refused at once while Redis is known
 * away, and a probe (`TIME`, one at a time) says Redis is lost when it is not answered within
 * `PROBE_TIMEOUT_MS`, and back when it is. The probe also bounds the difference between this
 * replica's clock and Redis's, so a change can carry a deadline Redis checks (`redisDeadline`): a
 * command that timed out here was still sent, and Redis runs it when it wakes up.
 */
import type { RedisClientType, createClient as CreateClient } from "redis"
import { ClusterUnavailable } from "../domain/errors.js"
import { log } from "../logging/log.js"

/** The client type the cluster uses (no modules, scripts or functions of its own: `eval` is enough). */
export type Redis = RedisClientType

/** Reconnection backoff: 50 ms doubling to at most 1 s. */
const reconnectDelay = (retries: number): number => Math.min(1000, 50 * 2 ** Math.min(retries, 5))

/** How long a command may take (ms) before it fails here, unless its caller gives a shorter deadline. */
export const COMMAND_TIMEOUT_MS = 2000

/** How often the liveness probe runs (ms), and how long it may go unanswered before Redis counts as lost. */
const PROBE_EVERY_MS = 250
const PROBE_TIMEOUT_MS = 1000

/** Taken off a deadline turned into Redis time, for clock drift since the probes it comes from (ms). */
const CLOCK_MARGIN_MS = 100
/** The clock offset is the tightest bound of the probes answered in this window (ms). */
const OFFSET_WINDOW_MS = 60_000

/** A command that was not answered in time; it was sent, so Redis may still run it later. */
export class RedisTimeout extends Error {
  constructor(what: string, ms: number) {
    super(`${what}: no answer from Redis within ${ms} ms`)
  }
}

/** A command not sent at all, because Redis is known to be away (no answer to the probe). */
export class RedisAway extends Error {
  constructor() {
    super("Redis does not answer")
  }
}

/** `promise`, or a `RedisTimeout` after `ms` (the promise itself is left to settle; its outcome is ignored). */
export const timed = <A>(promise: Promise<A>, ms: number, what = "a Redis command"): Promise<A> =>
  new Promise<A>((resolve, reject) => {
    const timer = setTimeout(() => reject(new RedisTimeout(what, ms)), Math.max(0, ms))
    promise.then(
      (a) => {
        clearTimeout(timer)
        resolve(a)
      },
      (e: unknown) => {
        clearTimeout(timer)
        reject(e)
      }
    )
  })

/**
 * Whether `promise` is fulfilled within `ms` of now by the clock, not merely before a timer of `ms`
 * runs: a process the machine leaves waiting for a core finds the answer and the expired timer both
 * due when it runs again, and the answer's callback comes first, so a late answer would count as in
 * time.
 */
export const answeredWithin = (promise: Promise<unknown>, ms: number, now: () => number = Date.now): Promise<boolean> => {
  const sent = now()
  return timed(promise, ms).then(
    () => now() - sent <= ms,
    () => false
  )
}

/** Methods of the client that send nothing by themselves (its life, builders of a MULTI or a scan). */
const UNSENT = new Set<PropertyKey>(["connect", "close", "destroy", "disconnect", "quit", "QUIT", "duplicate", "on", "off", "once", "emit", "multi", "MULTI", "scanIterator", "hScanIterator", "sScanIterator", "zScanIterator"])
/** What sends a MULTI. */
const MULTI_SENDS = new Set<PropertyKey>(["exec", "execAsPipeline", "EXEC"])

/**
 * The client with a time-out on every command, `multi().exec()` and each step of an async iterator
 * (`scanIterator`) included; nothing is sent (`RedisAway`) while `away()`.
 */
const guarded = (raw: Redis, away: () => boolean): Redis => {
  const refused = () => Promise.reject(new RedisAway())
  const wrapResult = (result: unknown, target: object, proxy: object): unknown => {
    if (result === target) return proxy
    if (result instanceof Promise) return timed(result, COMMAND_TIMEOUT_MS)
    if (typeof result === "object" && result !== null) {
      if (typeof (result as { exec?: unknown }).exec === "function") return wrap(result, MULTI_SENDS, false)
      if (Symbol.asyncIterator in result) {
        const it = result as AsyncIterableIterator<unknown>
        return {
          [Symbol.asyncIterator]() {
            return this
          },
          next: () => (away() ? refused() : timed(it.next(), COMMAND_TIMEOUT_MS)),
          return: (v?: unknown) => it.return?.(v) ?? Promise.resolve({ done: true, value: v })
        }
      }
    }
    return result
  }
  /** `sends`: the methods that send (`all`: every method but `UNSENT`). */
  const wrap = <T extends object>(target: T, sends: ReadonlySet<PropertyKey>, all: boolean): T => {
    const proxy: T = new Proxy(target, {
      get(t, prop) {
        const value = Reflect.get(t, prop, t) as unknown
        if (typeof value !== "function") return value
        const fn = value as (...a: unknown[]) => unknown
        const sending = all ? !UNSENT.has(prop) : sends.has(prop)
        if (!sending && !(all ? /^(multi|MULTI)$|Iterator$/.test(String(prop)) : true)) return fn.bind(t)
        return (...args: unknown[]) => (sending && away() ? refused() : wrapResult(fn.apply(t, args), t, proxy))
      }
    })
    return proxy
  }
  return wrap(raw, UNSENT, true)
}

/** Connection attempts at start before the start fails. */
const START_ATTEMPTS = 5

/** How long one connection attempt may take (ms). */
const CONNECT_TIMEOUT_MS = 2000

/** The redacted form of a Redis URL for log lines (no password). */
export const showRedisUrl = (url: string): string => {
  try {
    const u = new URL(url)
    if (u.password !== "") u.password = "***"
    return u.toString()
  } catch {
    return "(a Redis URL)"
  }
}

export class ClusterConnection {
  /** The commands client: every command has a time-out, none is sent while Redis does not answer. */
  readonly client: Redis
  /** The same client without the guard (the probe). */
  readonly #raw: Redis
  /** The blocking reads' client (XREAD BLOCK holds its connection). */
  readonly reader: Redis
  /** The pub/sub client (a subscribed connection takes no other command). */
  readonly subscriber: Redis
  #up = false
  #closed = false
  /** Connected once: from then on reconnection never gives up. */
  #wasUp = false
  readonly #onReturn = new Set<() => void>()
  readonly #onLoss = new Set<() => void>()
  #probe: NodeJS.Timeout | undefined
  #lastCheck = 0
  /** When the unanswered probe was sent (undefined: none is). */
  #probeSent: number | undefined
  /** A lower bound of (Redis's clock - this replica's clock), ms, from the probes answered in the last minute. */
  #offset = 0

  private constructor(
    readonly url: string,
    createClient: typeof CreateClient
  ) {
    // At start a Redis that does not answer within a few attempts fails the start; once connected,
    // reconnection goes on for as long as it takes.
    const strategy = (retries: number, cause: Error): number | Error => {
      if (this.#closed || (!this.#wasUp && retries >= START_ATTEMPTS)) return cause
      return reconnectDelay(retries)
    }
    this.#raw = createClient({
      url,
      disableOfflineQueue: true,
      socket: { reconnectStrategy: strategy, connectTimeout: CONNECT_TIMEOUT_MS }
    }) as Redis
    this.client = guarded(this.#raw, () => !this.#starting && this.#wasUp && !this.#up)
    this.reader = this.#raw.duplicate() as Redis
    this.subscriber = this.#raw.duplicate() as Redis
    // Errors are reported as a state change (lost/back), once; node-redis reconnects by itself.
    this.#raw.on("error", (e: Error) => this.#down(e))
    this.reader.on("error", () => undefined)
    this.subscriber.on("error", () => undefined)
    // Connected again: back only once a probe is answered (a frozen Redis still accepts connections).
    this.#raw.on("ready", () => (this.#wasUp ? this.#check() : this.#ready()))
  }

  /** Connects both clients; rejects (and closes them) when Redis cannot be reached at start. */
  static async open(url: string): Promise<ClusterConnection> {
    // Loaded here, in replica mode only: a store on its services file never loads the Redis client.
    // A CommonJS package: its exports are the namespace's default in every loader (Node's own, and the
    // bundle's, which gives a dynamically imported CommonJS module no named exports).
    const { createClient } = (await import("redis")).default
    const connection = new ClusterConnection(url, createClient)
    try {
      await connection.client.connect()
      await connection.reader.connect()
      await connection.subscriber.connect()
      await connection.#measure()
      connection.#wasUp = true
      connection.#probe = setInterval(() => connection.#check(), PROBE_EVERY_MS)
      connection.#probe.unref()
    } catch (e) {
      connection.close()
      throw new Error(`cannot reach Redis at ${showRedisUrl(url)}: ${(e as Error).message}`, { cause: e })
    }
    return connection
  }

  /**
   * While the replica starts, no command is refused at once for a missed probe: each is sent and
   * bounded by its time-out, so a Redis slow to answer (a machine starved of CPU) delays the start
   * instead of failing it, and a hung one still fails it within the time-out. Called once the
   * store runs; from then on a command is refused at once while Redis does not answer.
   */
  started(): void {
    this.#starting = false
  }
  #starting = true

  /** Whether the commands client is connected now and Redis answers. */
  get up(): boolean {
    return this.#raw.isReady && this.#up
  }

  /**
   * `localMs` (this replica's clock) as a time of Redis's clock that is surely not later: a script
   * that finds Redis's TIME past it runs after this replica passed `localMs`.
   */
  redisDeadline(localMs: number): number {
    return Math.floor(localMs + this.#offset - CLOCK_MARGIN_MS)
  }

  /** One TIME: the clock offset's lower bound (the answer came after Redis read its clock). */
  async #measure(): Promise<void> {
    const reply = (await this.#raw.sendCommand(["TIME"])) as [string, string]
    const received = Date.now()
    // Each answer gives a lower bound, loose when this process read it late (starved of CPU): the
    // tightest of the last minute's is kept.
    this.#samples.push({ at: received, offset: Number(reply[0]) * 1000 + Math.floor(Number(reply[1]) / 1000) - received })
    while (this.#samples.length > 1 && (this.#samples[0] as { at: number }).at < received - OFFSET_WINDOW_MS) this.#samples.shift()
    this.#offset = Math.max(...this.#samples.map((s) => s.offset))
  }
  readonly #samples: Array<{ readonly at: number; readonly offset: number }> = []

  /**
   * The liveness probe: one TIME at a time; unanswered past `PROBE_TIMEOUT_MS`, Redis is lost;
   * answered, it is back. No verdict on a turn that came late (this process starved of CPU: the
   * answer may be waiting, unread, behind the timer).
   */
  #check(): void {
    if (this.#closed) return
    const now = Date.now()
    const late = now - this.#lastCheck > PROBE_EVERY_MS * 1.5
    this.#lastCheck = now
    if (this.#probeSent !== undefined) {
      if (late) return
      if (Date.now() - this.#probeSent > PROBE_TIMEOUT_MS) this.#down(new Error(`no answer to a probe within ${PROBE_TIMEOUT_MS} ms`))
      return
    }
    if (!this.#raw.isReady) return
    this.#probeSent = Date.now()
    this.#measure().then(
      () => {
        this.#probeSent = undefined
        this.#ready()
      },
      () => {
        this.#probeSent = undefined
      }
    )
  }

  /** Calls `listener` each time Redis is lost; returns the unsubscribe. */
  onLoss(listener: () => void): () => void {
    this.#onLoss.add(listener)
    return () => this.#onLoss.delete(listener)
  }

  /** Calls `listener` each time Redis comes back after a loss; returns the unsubscribe. */
  onReturn(listener: () => void): () => void {
    this.#onReturn.add(listener)
    return () => this.#onReturn.delete(listener)
  }

  #down(e: Error): void {
    if (!this.#up || this.#closed) return
    this.#up = false
    log.warn(`Redis at ${showRedisUrl(this.url)} is unreachable (${e.message}): serving what this replica knows, refusing changes until it is back`, {
      event: "cluster_redis_lost"
    })
    for (const listener of [...this.#onLoss]) listener()
  }

  #ready(): void {
    if (this.#up || this.#closed) return
    const returning = this.#returning
    this.#up = true
    this.#returning = true
    if (!returning) return
    log.info(`Redis at ${showRedisUrl(this.url)} is reachable again: reconciling`, { event: "cluster_redis_back" })
    for (const listener of [...this.#onReturn]) listener()
  }
  /** The next `ready` is a return (the first one is the start). */
  #returning = false

  /**
   * Runs a Redis step of a change: a failure because Redis is away, no answer by `deadline`
   * (default: `COMMAND_TIMEOUT_MS` from now), or any Redis error becomes `ClusterUnavailable`,
   * which the HTTP layer answers 503.
   */
  async run<A>(what: string, step: () => Promise<A>, deadline = Date.now() + COMMAND_TIMEOUT_MS): Promise<A> {
    try {
      return await timed(step(), deadline - Date.now(), what)
    } catch (e) {
      throw ClusterUnavailable.of(what, e)
    }
  }

  /** Closes the three clients at once (pending commands are rejected). Idempotent. */
  close(): void {
    if (this.#closed) return
    this.#closed = true
    clearInterval(this.#probe)
    this.#onReturn.clear()
    this.#onLoss.clear()
    for (const c of [this.subscriber, this.reader, this.#raw]) {
      if (c.isOpen) c.destroy()
    }
  }
}
