/**
 * The OAuth entries of upstream services shared by the replicas of a cluster (docs/replicas-data.md):
 * one Redis hash, `oauth`, one field per service, each value encrypted with AES-256-GCM under the
 * key of MCPSTORE_SECRET_KEY (the same derivation as the token file, src/config/token-vault.ts).
 * A per-replica key file would make every replica's entries unreadable to the others, so in a
 * cluster the secret is required, and a check value in the hash refuses, at start, a replica whose
 * secret differs from the one the entries were written with.
 *
 * Each replica keeps the entries decrypted in memory (`find` is synchronous, as the file's) and
 * hears of the others' changes on a pub/sub channel, `oauth:changed` (a missed message only means
 * an older token: a refresh re-reads the entry under the lock before spending anything).
 * Refreshes are single-flight across replicas: `exclusive` holds the lock `oauth:lock:<service>`
 * (src/redis/lock.ts) and gives the task the entry as stored at that moment.
 *
 * The authorizations under way are shared too (hash `oauth:pending`, sealed): a state started on one
 * replica is finished by a callback or a pasted code on any other, taken once (`takePending`: HGET
 * and HDEL in one MULTI).
 */
import { keyOfSecret, reboundEntry, seal, unseal, type PendingRecord, type TokenStore, type VaultEntry } from "./token-vault.js"
import { log } from "../logging/log.js"
import { clusterKey } from "../redis/key-names.js"
import { withLock } from "../redis/lock.js"
import { COMMAND_TIMEOUT_MS, type Redis } from "../redis/connection.js"
import type { ClusterData } from "../records/redis-records.js"

/** The hash field of the check value (no service key starts with a NUL). */
const CHECK_FIELD = "\u0000check"
const CHECK_TEXT = "mcp-store oauth key check"
/** Expired authorizations under way (any replica's) removed with each new one kept: the hash stays bounded by the live ones. */
const PENDING_SWEEP = 100
/** A refresh holds the lock at most this long (the token endpoint's answer included). */
export const REFRESH_LOCK_TTL_MS = 30_000

/**
 * How long a task may run under a refresh lock of `ttlMs`: what is left once the entry's re-read
 * and the new tokens' write (a command's time-out each) are set aside, and at least half the lock.
 */
export const lapseMs = (ttlMs: number): number => Math.max(ttlMs / 2, ttlMs - 2 * COMMAND_TIMEOUT_MS - 1000)

/** The secret is missing or is not the cluster's. */
export class TokenKeyError extends Error {
  override readonly name = "TokenKeyError"
}

export interface RedisTokenOptions {
  /** The secret text; default MCPSTORE_SECRET_KEY. */
  readonly secret?: string | undefined
  /** The refresh lock's TTL (ms); default `REFRESH_LOCK_TTL_MS`. */
  readonly lockTtlMs?: number | undefined
}

export class RedisTokenStore implements TokenStore {
  private readonly entries = new Map<string, VaultEntry>()
  /** This replica's authorizations under way, by state (also in the hash `oauth:pending`, encrypted, for a restart). */
  private readonly pending = new Map<string, PendingRecord>()
  private readonly hash: string
  private readonly pendingHash: string
  /** The states of `pendingHash` by expiry (ms), so that any replica removes expired ones (a replica gone never does). */
  private readonly pendingExpiry: string
  private readonly channel: string
  private readonly listeners = new Set<(service: string) => void>()
  private subscriber: Redis | undefined

  private constructor(
    private readonly data: ClusterData,
    private readonly key: Buffer,
    private readonly lockTtlMs: number
  ) {
    this.hash = clusterKey(data.cluster, "oauth")
    this.pendingHash = clusterKey(data.cluster, "oauth", "pending")
    this.pendingExpiry = clusterKey(data.cluster, "oauth", "pending", "expiry")
    this.channel = clusterKey(data.cluster, "oauth", "changed")
  }

  /** Reads the cluster's entries and follows their changes; throws `TokenKeyError` without the right secret. */
  static async open(data: ClusterData, options: RedisTokenOptions = {}): Promise<RedisTokenStore> {
    const secret = options.secret ?? process.env["MCPSTORE_SECRET_KEY"]
    if (secret === undefined || secret === "") {
      throw new TokenKeyError(
        "replicas share the OAuth tokens of upstream services, encrypted: set MCPSTORE_SECRET_KEY to the same secret on every replica (a key file beside the services file is one replica's only)"
      )
    }
    const store = new RedisTokenStore(data, keyOfSecret(secret), options.lockTtlMs ?? REFRESH_LOCK_TTL_MS)
    await data.client.hSetNX(store.hash, CHECK_FIELD, seal(store.key, CHECK_TEXT))
    const check = await data.client.hGet(store.hash, CHECK_FIELD)
    if (check === null || store.open(check) !== CHECK_TEXT) {
      throw new TokenKeyError("MCPSTORE_SECRET_KEY is not the secret the cluster's OAuth tokens were encrypted with: give every replica the same one")
    }
    const subscriber = data.client.duplicate()
    subscriber.on("error", (e: Error) => log.warn(`the OAuth change listener's Redis connection failed: ${e.message}`, { event: "cluster_oauth_listener_error" }))
    await subscriber.connect()
    await subscriber.subscribe(store.channel, (service) => void store.reload(service).catch(() => undefined))
    store.subscriber = subscriber
    await store.reloadAll()
    // Messages sent while the listener was away are lost: once it is back, every entry is read again.
    subscriber.on("ready", () => void store.reloadAll().catch(() => undefined))
    const now = Date.now()
    for (const [state, sealed] of Object.entries(await data.client.hGetAll(store.pendingHash))) {
      const plain = store.open(sealed)
      const record = plain === undefined ? undefined : (JSON.parse(plain) as PendingRecord)
      if (record !== undefined && record.expiresAt > now) store.pending.set(state, record)
      else await data.client.hDel(store.pendingHash, state)
    }
    return store
  }

  private open(sealed: string): string | undefined {
    try {
      return unseal(this.key, sealed)
    } catch {
      return undefined
    }
  }

  /** Takes a stored entry (nothing of it is ever logged: the service is named, never shown). */
  private adopt(service: string, sealed: string | null | undefined): VaultEntry | undefined {
    if (sealed === null || sealed === undefined) {
      this.entries.delete(service)
      return undefined
    }
    const plain = this.open(sealed)
    if (plain === undefined) {
      this.entries.delete(service)
      log.warn(`the OAuth entry of ${service} in Redis cannot be read: the service must be authorized again`, { event: "oauth_vault_unreadable", service })
      return undefined
    }
    // An entry written on SDK 1.x is bound as SDK v2 binds it (src/config/token-vault.ts `reboundEntry`);
    // it is stored so by its next write (a refresh, an authorization), never by a read racing another replica's.
    const entry = reboundEntry(JSON.parse(plain) as VaultEntry)
    this.entries.set(service, entry)
    return entry
  }

  /** Every entry as stored now (at start, and when the change listener reconnects). */
  private async reloadAll(): Promise<void> {
    const stored = await this.data.client.hGetAll(this.hash)
    for (const service of this.entries.keys()) if (!Object.hasOwn(stored, service)) this.entries.delete(service)
    for (const [service, sealed] of Object.entries(stored)) if (service !== CHECK_FIELD) this.adopt(service, sealed)
  }

  /** The entry of a service as stored now. */
  private async reload(service: string): Promise<VaultEntry | undefined> {
    const entry = this.adopt(service, await this.data.client.hGet(this.hash, service))
    for (const l of this.listeners) l(service)
    return entry
  }

  find(service: string): VaultEntry | undefined {
    return this.entries.get(service)
  }

  entriesUnder(prefix: string): ReadonlyArray<VaultEntry> {
    return [...this.entries.values()].filter((e) => e.service.startsWith(prefix))
  }

  async put(entry: VaultEntry): Promise<void> {
    this.entries.set(entry.service, entry)
    await this.data.client.multi().hSet(this.hash, entry.service, seal(this.key, JSON.stringify(entry))).publish(this.channel, entry.service).exec()
  }

  async remove(service: string): Promise<void> {
    this.entries.delete(service)
    await this.data.client.multi().hDel(this.hash, service).publish(this.channel, service).exec()
  }

  /**
   * Runs the task under the service's refresh lock, with the entry re-read once the lock is held,
   * and `lapse` aborted `lapseMs(lockTtlMs)` after it was taken: a refresh slower than its
   * lock (a token endpoint that answers late) stops while the lock still holds, instead of going on
   * while another replica takes the lock and refreshes with the same token.
   */
  exclusive<A>(service: string, task: (latest: VaultEntry | undefined, lapse: AbortSignal | undefined) => Promise<A>): Promise<A> {
    const wake = () => {
      let cancel = () => undefined as void
      const changed = new Promise<void>((resolve) => {
        const listener = (s: string) => s === service && resolve()
        this.listeners.add(listener)
        cancel = () => void this.listeners.delete(listener)
      })
      return { changed, cancel }
    }
    return withLock(this.data.client, clusterKey(this.data.cluster, "oauth", "lock", service), { ttlMs: this.lockTtlMs, waitMs: 2 * this.lockTtlMs, wake }, async () => {
      const lapse = new AbortController()
      const ms = lapseMs(this.lockTtlMs)
      const timer = setTimeout(() => lapse.abort(new Error(`the refresh took longer than ${ms} ms, as long as it may hold the cluster's refresh lock`)), ms)
      try {
        return await task(await this.reload(service), lapse.signal)
      } finally {
        clearTimeout(timer)
      }
    })
  }

  pendingRecords(): ReadonlyArray<PendingRecord> {
    const now = Date.now()
    return [...this.pending.values()].filter((p) => p.expiresAt > now).sort((a, b) => a.expiresAt - b.expiresAt)
  }

  /** Keeps an authorization under way, and removes up to `PENDING_SWEEP` expired ones of any replica. */
  async putPending(record: PendingRecord): Promise<void> {
    this.pending.set(record.state, record)
    const expired = await this.data.client.zRangeByScore(this.pendingExpiry, 0, Date.now(), { LIMIT: { offset: 0, count: PENDING_SWEEP } })
    const change = this.data.client
      .multi()
      .hSet(this.pendingHash, record.state, seal(this.key, JSON.stringify(record)))
      .zAdd(this.pendingExpiry, { score: record.expiresAt, value: record.state })
    if (expired.length > 0) change.hDel(this.pendingHash, expired).zRem(this.pendingExpiry, expired)
    await change.exec()
  }

  async removePending(state: string): Promise<void> {
    this.pending.delete(state)
    await this.data.client.multi().hDel(this.pendingHash, state).zRem(this.pendingExpiry, state).exec()
  }

  /** Any replica's authorization under way, as stored now (an expired or unreadable one is none). */
  async findPending(state: string): Promise<PendingRecord | undefined> {
    return this.pendingOf(await this.data.client.hGet(this.pendingHash, state))
  }

  /**
   * Takes any replica's authorization under way, once across the cluster: HGET and HDEL in one
   * MULTI, so of two replicas finishing one state at the same moment only one reads it.
   */
  async takePending(state: string): Promise<PendingRecord | undefined> {
    this.pending.delete(state)
    const [sealed] = (await this.data.client.multi().hGet(this.pendingHash, state).hDel(this.pendingHash, state).zRem(this.pendingExpiry, state).exec()) as unknown as [string | null, number, number]
    return this.pendingOf(sealed)
  }

  private pendingOf(sealed: string | null | undefined): PendingRecord | undefined {
    if (sealed === null || sealed === undefined) return undefined
    const plain = this.open(sealed)
    if (plain === undefined) return undefined
    const record = JSON.parse(plain) as PendingRecord
    return record.expiresAt > Date.now() ? record : undefined
  }

  /**
   * Reads a service's entry from Redis now (its copy here follows the change messages, which a
   * listener reconnecting may miss): a request of a principal's own authorization reads it first,
   * so a token given or deleted on another replica is seen at once. Bounded by the client's time-out.
   */
  async readThrough(service: string): Promise<void> {
    await this.reload(service)
  }

  /** Called after each change of any replica is read (tests wait on it). Returns the unsubscribe. */
  onChange(listener: (service: string) => void): () => void {
    this.listeners.add(listener)
    return () => void this.listeners.delete(listener)
  }

  /** Stops listening (the store's client stays open: it is the store's). */
  async close(): Promise<void> {
    this.listeners.clear()
    this.subscriber?.destroy()
    this.subscriber = undefined
  }
}
