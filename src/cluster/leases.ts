/**
 * Leases in the cluster's Redis (docs/replicas.md, "Leases"): one owner at a time for a thing (a
 * service `<scope>/<name>`, or `leader`), held by a key `lease:<label>` = replica id with a time to
 * live. A lease is taken with SET NX PX, renewed and released by compare-and-set Lua scripts (only
 * the holder renews or deletes), so a replica that lost its lease never extends or drops another's.
 *
 * No two owners: the holder's deadline is measured from BEFORE the renewal that set it (the key's
 * expiry in Redis is later: it counts from the script's arrival), and a timer at the earliest
 * deadline drops every lease not renewed by then, even while Redis does not answer. Another replica
 * can only take the key once Redis expired it, after that deadline. The one exception, an outage of
 * Redis for every replica, keeps leases past their deadlines only while the others have promised
 * to take none of them (`vouchedUntil`, `quietUntil`, both per lease; docs/replicas.md, "Leases").
 *
 * A replica takes free leases only while it holds fewer than its fair share; an orderly shutdown
 * releases its leases and publishes `lease-released`, which makes the others look at once.
 */
import { log } from "../logging/log.js"
import type { Redis } from "../redis/connection.js"
import { clusterKey } from "../redis/key-names.js"
import { RELEASE } from "../redis/lock.js"

/**
 * KEYS: lease keys. ARGV: replica id, ttl ms. Renews each key this replica holds, and takes back a
 * key that is gone (Redis lost it: restarted empty, or it expired while every replica kept its
 * services through an outage, see `LeasesOptions.vouchedUntil`); returns 1 per key held now, 0 per key
 * another replica holds.
 */
export const RENEW = `
local out = {}
for i, key in ipairs(KEYS) do
  local holder = redis.call('GET', key)
  if holder == ARGV[1] then
    redis.call('PEXPIRE', key, ARGV[2])
    out[i] = 1
  elseif holder == false then
    redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
`

/** What the holder of leases is told: each lease taken, and each lost (not renewed in time, or taken away). */
export interface LeaseEvents {
  readonly taken: (label: string) => void
  readonly lost: (label: string, why: string) => void
}

export interface LeasesOptions {
  readonly cluster: string
  readonly replicaId: string
  /** Time to live of a lease (ms). */
  readonly ttlMs: number
  /** The clock (tests); Date.now by default. */
  readonly now?: () => number
  /**
   * Until when (epoch ms) no other replica can take `label` although Redis does not answer here:
   * every other replica that answered said it does not reach Redis either, and promised to take
   * this lease (named in the question) no sooner than this (an outage, not a partition of this one;
   * src/cluster/cluster.ts). A deadline passed before then is not acted on; the lease is renewed (or
   * taken back) as soon as Redis returns. 0 or absent: nobody vouched.
   */
  readonly vouchedUntil?: ((label: string) => number) | undefined
  /**
   * Until when (epoch ms) this replica does not take `label`: it promised so to a replica cut off
   * from Redis that named it (which keeps that lease past its deadline meanwhile). A `SET NX` sent
   * before that promise and answered after it is given back at once. 0 or absent: no promise.
   */
  readonly quietUntil?: ((label: string) => number) | undefined
}

/** The pub/sub channel that says leases were released (the message is the releasing replica's id). */
export const releasedChannel = (cluster: string): string => clusterKey(cluster, "lease-released")

/** The leases one replica holds, with their deadlines. */
export class Leases {
  /** Owned label → deadline (epoch ms): past it, the lease counts as lost here. */
  readonly #owned = new Map<string, number>()
  #expiry: NodeJS.Timeout | undefined
  #closed = false
  /** No more leases are taken (`stopTaking`): those held are kept and renewed until released. */
  #stoppedTaking = false
  readonly #now: () => number
  /**
   * Dropped this much before the deadline (ms): for timer lateness and clock steps, and so that the
   * service stopped at the deadline has ended its process before another replica can take over.
   */
  readonly #margin: number

  constructor(
    private readonly client: Redis,
    readonly options: LeasesOptions,
    private readonly events: LeaseEvents
  ) {
    this.#now = options.now ?? Date.now
    this.#margin = Math.min(1000, Math.floor(options.ttlMs / 5))
  }

  key(label: string): string {
    return clusterKey(this.options.cluster, "lease", label)
  }

  owns(label: string): boolean {
    return this.#owned.has(label)
  }

  /** The labels held now. */
  owned(): ReadonlyArray<string> {
    return [...this.#owned.keys()]
  }

  /**
   * The labels held now, those past their deadline (and not vouched for) dropped first: what a
   * replica cut off from Redis names in its question (src/cluster/cluster.ts), so that a lease whose
   * expiry timer has not fired yet (a process starved of CPU) is never named and kept past its deadline.
   */
  heldNow(): ReadonlyArray<string> {
    this.expire()
    return this.owned()
  }

  /**
   * Takes free leases among `candidates`, in their order, while this replica holds fewer than
   * `share` (its fair share: ceil(things / live replicas)). One MGET finds the free ones, then they
   * are taken with SET NX PX, as many at once as the share still allows (another replica may take
   * one first: the next free one is tried). Resolves with the labels taken.
   */
  async claim(candidates: Iterable<string>, share: number): Promise<ReadonlyArray<string>> {
    const now = this.#now()
    const wanted = [...candidates].filter((l) => !this.#owned.has(l) && !this.#quiet(l, now))
    const taken: string[] = []
    if (this.#closed || this.#stoppedTaking || this.#owned.size >= share || wanted.length === 0) return taken
    const holders = await this.client.mGet(wanted.map((l) => this.key(l)))
    const free = wanted.filter((_, i) => holders[i] === null)
    while (free.length > 0 && !this.#closed && !this.#stoppedTaking && this.#owned.size < share) {
      const batch = free.splice(0, share - this.#owned.size)
      const started = this.#now()
      const replies = await Promise.all(
        batch.map((label) => this.client.set(this.key(label), this.options.replicaId, { condition: "NX", expiration: { type: "PX", value: this.options.ttlMs } }))
      )
      batch.forEach((label, i) => {
        if (replies[i] !== "OK") return
        if (this.#closed || this.#stoppedTaking || this.#quiet(label, started)) {
          // Closed, no longer taking, or promised to take none, meanwhile: give it back at once rather than hold it until it expires.
          void this.client.eval(RELEASE, { keys: [this.key(label)], arguments: [this.options.replicaId] }).catch(() => undefined)
          return
        }
        this.#owned.set(label, started + this.options.ttlMs - this.#margin)
        taken.push(label)
        log.info(`lease ${label} taken by replica ${this.options.replicaId}`, { event: "lease_taken", lease: label, replica: this.options.replicaId })
        this.events.taken(label)
      })
    }
    this.#schedule()
    return taken
  }

  /** Renews every lease held, in one script; a lease found held by another (or gone) is lost. */
  async renew(): Promise<void> {
    const labels = this.owned()
    if (labels.length === 0) return
    const started = this.#now()
    const reply = (await this.client.eval(RENEW, { keys: labels.map((l) => this.key(l)), arguments: [this.options.replicaId, String(this.options.ttlMs)] })) as number[]
    labels.forEach((label, i) => {
      if (!this.#owned.has(label)) return
      if (reply[i] === 1) this.#owned.set(label, started + this.options.ttlMs - this.#margin)
      else this.#lose(label, "its key is gone or held by another replica")
    })
    this.#schedule()
  }

  /** Drops every lease whose deadline has passed (called by the expiry timer; safe to call any time). */
  expire(): void {
    const now = this.#now()
    for (const [label, deadline] of [...this.#owned]) {
      // Nobody can take it while Redis is away for everyone: kept (and looked at again) until that changes.
      if (now >= deadline && now >= this.#vouched(label)) this.#lose(label, "not renewed before its deadline (Redis unreachable or slow)")
    }
    this.#schedule()
  }

  /**
   * Releases leases held (all by default) so others take them at once, and says so on the
   * `lease-released` channel. A lease whose release fails (Redis away) is still dropped here.
   */
  async release(labels: ReadonlyArray<string> = this.owned()): Promise<void> {
    const held = labels.filter((l) => this.#owned.has(l))
    if (held.length === 0) return
    for (const label of held) this.#owned.delete(label)
    this.#schedule()
    try {
      await this.client.eval(RELEASE, { keys: held.map((l) => this.key(l)), arguments: [this.options.replicaId] })
      await this.client.publish(releasedChannel(this.options.cluster), this.options.replicaId)
    } finally {
      for (const label of held) {
        log.info(`lease ${label} released by replica ${this.options.replicaId}`, { event: "lease_released", lease: label, replica: this.options.replicaId })
      }
    }
  }

  /** Stops the expiry timer; leases are not released (see `release`). */
  /**
   * Takes no more leases, also none a claim under way gets from Redis (given back at once): a
   * replica that leaves may refuse connections before it has released what it holds, and a replica
   * asking during an outage counts a refusing one as taking nothing.
   */
  stopTaking(): void {
    this.#stoppedTaking = true
  }

  close(): void {
    this.#closed = true
    clearTimeout(this.#expiry)
    this.#expiry = undefined
  }

  #lose(label: string, why: string): void {
    if (!this.#owned.delete(label)) return
    log.warn(`lease ${label} lost by replica ${this.options.replicaId}: ${why}`, { event: "lease_lost", lease: label, replica: this.options.replicaId })
    this.events.lost(label, why)
  }

  /** One timer, at the earliest deadline. */
  #schedule(): void {
    clearTimeout(this.#expiry)
    this.#expiry = undefined
    if (this.#closed || this.#owned.size === 0) return
    const now = this.#now()
    // A deadline already past (kept while vouched for) is looked at again when the vouching ends.
    const at = Math.min(...[...this.#owned].map(([label, deadline]) => (deadline > now ? deadline : Math.max(deadline, this.#vouched(label)))))
    this.#expiry = setTimeout(() => this.expire(), Math.max(0, at - now))
    this.#expiry.unref()
  }

  /** Whether `label` is not to be taken by a `SET NX` sent at `since` (or given back: a promise to take it no sooner made since). */
  #quiet(label: string, since: number): boolean {
    return (this.options.quietUntil?.(label) ?? 0) > since
  }

  /** Until when `label` is kept past its deadline (0: not vouched for). */
  #vouched(label: string): number {
    return this.options.vouchedUntil?.(label) ?? 0
  }

  /** How long before its deadline (as renewed) a lease is dropped here (ms). */
  get margin(): number {
    return this.#margin
  }
}

/** A replica's fair share of `things` among `replicas` live replicas. */
export const fairShare = (things: number, replicas: number): number => Math.ceil(things / Math.max(1, replicas))
