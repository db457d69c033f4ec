/**
 * The replica's connections to the cluster's Redis (docs/replicas.md): one client for commands and
 * one duplicate for the blocking stream reads, both reconnecting on their own with a capped backoff.
 * Commands are never queued while Redis is away (`disableOfflineQueue`): a change made then fails
 * at once as `ClusterUnavailable` (503) instead of hanging. The loss and the return of Redis are one
 * log line each, not one per failed reconnection attempt, and listeners are told of the return (the
 * replica reconciles then, src/cluster/definitions.ts).
 */
import { createClient, type RedisClientType } from "redis"
import { ClusterUnavailable } from "../runtime/errors.js"
import { log } from "../runtime/log.js"

/** The client type the cluster uses (no modules, scripts or functions of its own: `eval` is enough). */
export type Redis = RedisClientType

/** Reconnection backoff: 50 ms doubling to at most 1 s. */
const reconnectDelay = (retries: number): number => Math.min(1000, 50 * 2 ** Math.min(retries, 5))

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
  /** The commands client. */
  readonly client: Redis
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

  private constructor(readonly url: string) {
    // At start a Redis that does not answer within a few attempts fails the start; once connected,
    // reconnection goes on for as long as it takes.
    const strategy = (retries: number, cause: Error): number | Error => {
      if (this.#closed || (!this.#wasUp && retries >= START_ATTEMPTS)) return cause
      return reconnectDelay(retries)
    }
    this.client = createClient({
      url,
      disableOfflineQueue: true,
      socket: { reconnectStrategy: strategy, connectTimeout: CONNECT_TIMEOUT_MS }
    }) as Redis
    this.reader = this.client.duplicate() as Redis
    this.subscriber = this.client.duplicate() as Redis
    // Errors are reported as a state change (lost/back), once; node-redis reconnects by itself.
    this.client.on("error", (e: Error) => this.#down(e))
    this.reader.on("error", () => undefined)
    this.subscriber.on("error", () => undefined)
    this.client.on("ready", () => this.#ready())
  }

  /** Connects both clients; rejects (and closes them) when Redis cannot be reached at start. */
  static async open(url: string): Promise<ClusterConnection> {
    const connection = new ClusterConnection(url)
    try {
      await connection.client.connect()
      await connection.reader.connect()
      await connection.subscriber.connect()
      connection.#wasUp = true
    } catch (e) {
      connection.close()
      throw new Error(`cannot reach Redis at ${showRedisUrl(url)}: ${(e as Error).message}`, { cause: e })
    }
    return connection
  }

  /** Whether the commands client is connected now. */
  get up(): boolean {
    return this.client.isReady
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
   * Runs a Redis step of a change: a failure because Redis is away (or any Redis error) becomes
   * `ClusterUnavailable`, which the HTTP layer answers 503.
   */
  async run<A>(what: string, step: () => Promise<A>): Promise<A> {
    try {
      return await step()
    } catch (e) {
      throw ClusterUnavailable.of(what, e)
    }
  }

  /** Closes the three clients at once (pending commands are rejected). Idempotent. */
  close(): void {
    if (this.#closed) return
    this.#closed = true
    this.#onReturn.clear()
    this.#onLoss.clear()
    for (const c of [this.subscriber, this.reader, this.client]) {
      if (c.isOpen) c.destroy()
    }
  }
}
