/**
 * Replica mode as one object, a resource of the replica layers (src/cluster/replica-layers.ts;
 * docs/replicas.md): the Redis connections, the cluster secret, this replica's entry in the
 * registry of live replicas, the shared definitions, the `leader` lease (the leader writes the
 * definitions to a snapshot file beside the services file after each change, for backups, and
 * prunes views of deleted services), and one owner per service:
 * a lease per service, balanced over the live replicas, decides which replica runs it
 * (src/machines/replicated.ts `OWN`/`DISOWN`); the owner publishes its views (src/cluster/shared-views.ts),
 * every other replica shows them and forwards requests to the owner (src/cluster/forward.ts).
 *
 * `Cluster.start` acquires the parts in order and releases what it got when a step fails; `attach`
 * connects it to the store's actors; `stop` releases everything (the keeper's timer, the leases, the
 * stream reader, the connections, the registry entry).
 */
import { randomBytes, randomUUID } from "node:crypto"
import { hostname } from "node:os"
import { setTimeout as sleep } from "node:timers/promises"
import type { ClusterOptions } from "../config/options.js"
import type { ReplicaHost } from "../runtime/services.js"
import { writeAtomically } from "../config/atomic-write.js"
import { serialize, type JsonObject, type ServicesConfig } from "../config/services-document.js"
import { log } from "../logging/log.js"
import { viewOf, type PublishedView } from "../machines/replicated.js"
import { statusOf } from "../machines/service.js"
import type { ReplicatedActorRef } from "../machines/replicated.js"
import type { ServiceEvent } from "../machines/service.js"
import { McpRequestError, type McpConnection } from "../mcp/types.js"
import { answeredWithin, ClusterConnection, showRedisUrl } from "../redis/connection.js"
import { RedisDefinitions } from "../config/redis-definitions.js"
import { Forwarder, NotDelivered, RemoteConnection, RETRY_MS, type SendOptions } from "./forward.js"
import { clusterKey } from "../redis/key-names.js"
import { fairShare, Leases, releasedChannel } from "./leases.js"
import { conclude, QuietPromises, type RedisAnswer, type Reply, type Verdict } from "./outage.js"
import { SharedViews, type WireView } from "./shared-views.js"

/** The longest a hand-over waits for the service's connections to close before releasing its lease (ms). */
const DRAIN_MS = 15_000
/**
 * How long the close of a service's connection at a hand-over waits for the requests in flight on it
 * to end (ms): a call that began before the hand-over ends on the connection it began on instead of
 * being cancelled, unless it lasts longer than this.
 */
const SETTLE_MS = 5000

/**
 * How long a replica asked whether it reaches Redis waits for the answer to a command it sends then
 * (ms): an answer from before the question could predate an outage.
 */
const CONFIRM_MS = 250
/** The shortest time between two questions to the others that none answered (`#checkOutage`). */
const SILENT_PAUSE_MS = 250
/** At most one line per this time (ms) says that this replica answered "no Redis" while Redis was only slow. */
const LATE_LINE_EVERY_MS = 60_000

/** The lease of the replica that writes the snapshot file. */
const LEADER = "leader"

/** The snapshot file of a services file: what the leader writes after each change of the definitions. */
export const snapshotPath = (servicesFile: string): string => `${servicesFile}.cluster-snapshot.json`

/** What the cluster needs of the store's actors (implemented by src/runtime/store.ts). */
export type { ReplicaHost }

/** One live replica as the registry holds it. */
export interface ReplicaEntry {
  readonly id: string
  /** Where the other replicas reach it (empty until it listens, when `--advertise-url` is not given). */
  readonly url: string
  readonly started_at: string
}

export class Cluster {
  /** This replica's id in the cluster (host, pid and a random part: unique, and readable in logs). */
  readonly replicaId = `${hostname().replace(/[^A-Za-z0-9.-]/g, "-").slice(0, 40)}-${process.pid}-${randomUUID().slice(0, 8)}`
  readonly #started = new Date().toISOString()
  #advertiseUrl: string
  #heartbeat: NodeJS.Timeout | undefined
  #stopping: Promise<void> | undefined
  /** The `leader` lease. */
  readonly leader: Leases
  /** The services' leases. */
  readonly leases: Leases
  readonly views: SharedViews
  readonly #forwarder: Forwarder
  #host: ReplicaHost | undefined
  /** The newest view each service's owner published, as read here. */
  readonly #latest = new Map<string, WireView>()
  /** The catalog tag of the tools and catalog each mirroring actor shows. */
  readonly #shownTags = new Map<string, string>()
  /** Views being applied, one chain per service, so they are applied in the order they came. */
  readonly #applying = new Map<string, Promise<void>>()
  /** The forwarding connection of each service another replica runs. */
  readonly #remotes = new Map<string, RemoteConnection>()
  /** Live replicas as last read (the fair share, and whom to ask during an outage). */
  #peers: ReadonlyArray<ReplicaEntry> = []
  /**
   * Until when (epoch ms) each lease past its deadline is kept: what the replicas that vouched
   * promised for it, the leases named in the question they answered (`#checkOutage`); none: nobody
   * vouches (not an outage, or a partition of this one).
   */
  readonly #vouched = new Map<string, number>()
  /** What the last answers said, as this replica last logged it (`Verdict`). */
  #verdict: Verdict | undefined = undefined
  /** The leases this replica does not take for now: it told replicas that lost Redis, and named them, that it does not reach Redis either. */
  readonly #quiet = new QuietPromises()
  /** When the last line said that an answer "no Redis" came from a Redis only slow (epoch ms). */
  #lateSaid = 0
  #outageTimer: NodeJS.Timeout | undefined
  /** After Redis came back, services are not claimed before this (epoch ms): their previous owners take them back first. */
  #claimAfter = 0
  #claimSoon = false
  /**
   * When this replica last lost each service's lease: it leaves it to the others (if any) for half a
   * lease time (one of their keeper turns), then takes it if it is still free.
   */
  readonly #lostAt = new Map<string, number>()
  #unwatch: (() => void) | undefined
  /** Snapshot writes, one at a time. */
  #snapshots: Promise<void> = Promise.resolve()

  private constructor(
    readonly options: ClusterOptions,
    readonly connection: ClusterConnection,
    /** The shared secret of the replicas' internal requests. */
    readonly secret: string,
    readonly definitions: RedisDefinitions,
    maxMessageBytes: number
  ) {
    this.#advertiseUrl = options.advertiseUrl ?? ""
    const leaseOptions = {
      cluster: options.name,
      replicaId: this.replicaId,
      ttlMs: this.leaseMs,
      vouchedUntil: (label: string) => this.#vouched.get(label) ?? 0,
      quietUntil: (label: string) => this.#quiet.until(label)
    }
    this.leader = new Leases(connection.client, leaseOptions, { taken: () => this.#writeSnapshot(), lost: () => undefined })
    this.leases = new Leases(connection.client, leaseOptions, {
      taken: (field) => this.#own(field),
      lost: (field) => {
        // Lost here (slow renewals, a cut from Redis): the other replicas get the first chance to take it.
        this.#lostAt.set(field, Date.now())
        this.#host?.face(field)?.send({ type: "DISOWN" })
      }
    })
    this.views = new SharedViews(connection.client, connection.subscriber, options.name, this.replicaId, () => this.#advertiseUrl)
    this.#forwarder = new Forwarder({
      cluster: options.name,
      secret,
      maxAnswerBytes: 2 * maxMessageBytes + 64 * 1024,
      ownerUrl: (field, again) => this.#ownerUrl(field, again),
      redisAway: () => !this.connection.up
    })
  }

  /** The lease time to live (ms). */
  get leaseMs(): number {
    return this.options.leaseMs ?? 5000
  }

  /**
   * Connects to the cluster's Redis, seeds an empty cluster from `initial` (the services file),
   * reads the definitions and registers this replica; `maxMessageBytes` bounds forwarded answers. Rejects with a clear message when Redis
   * cannot be reached at start.
   */
  static async start(options: ClusterOptions, servicesFile: string, initial: ServicesConfig, maxMessageBytes: number): Promise<Cluster> {
    const connection = await ClusterConnection.open(options.redisUrl)
    try {
      const secret = options.secret ?? (await sharedSecret(connection, options.name))
      const definitions = await RedisDefinitions.open(connection, options.name, servicesFile, initial)
      const cluster = new Cluster(options, connection, secret, definitions, maxMessageBytes)
      await cluster.#register()
      cluster.#unwatch = definitions.onChange(() => {
        if (!cluster.leader.owns(LEADER)) return
        cluster.#writeSnapshot()
        // The views of services deleted while their owner was gone.
        void cluster.views.prune(definitions.fields()).catch(() => undefined)
      })
      await connection.subscriber.subscribe(releasedChannel(options.name), () => cluster.claimSoon())
      await cluster.#keep()
      cluster.#heartbeat = setInterval(() => void cluster.#keep(), Math.max(100, Math.floor(cluster.leaseMs / 3)))
      cluster.#heartbeat.unref()
      log.info(`replica ${cluster.replicaId} joined cluster ${options.name} at ${showRedisUrl(options.redisUrl)} (revision ${definitions.revision})`, {
        event: "cluster_joined",
        replica: cluster.replicaId,
        cluster: options.name
      })
      return cluster
    } catch (e) {
      connection.close()
      throw e
    }
  }

  /** Sets the advertised URL once the server listens, when `--advertise-url` was not given. */
  advertise(url: string): void {
    if (this.#advertiseUrl !== "") return
    this.#advertiseUrl = url
    void this.#register().catch(() => undefined)
  }

  get advertiseUrl(): string {
    return this.#advertiseUrl
  }

  #replicaKey(id: string): string {
    return clusterKey(this.options.name, "replica", id)
  }

  /** Writes (or refreshes) this replica's registry entry; it expires unless refreshed within 3 heartbeats. */
  async #register(): Promise<void> {
    const entry: ReplicaEntry = { id: this.replicaId, url: this.#advertiseUrl, started_at: this.#started }
    await this.connection.client.set(this.#replicaKey(this.replicaId), JSON.stringify(entry), { expiration: { type: "PX", value: this.leaseMs } })
  }

  /**
   * One turn of the keeper (every ttl/3): the leases renewed and the registry entry refreshed, at
   * once and on their own, so that nothing else can hold them up; then, unless the previous one is
   * still running, the upkeep: the live replicas read, free leases taken, and one too many handed
   * over (in the background: closing a service can take seconds). A renewal still running when the
   * next is due (a slow Redis, a starved process) is not doubled; a slow one is a warning line.
   */
  async #keep(): Promise<void> {
    void this.#upkeep()
    if (this.#renewing) return
    this.#renewing = true
    const started = performance.now()
    try {
      await Promise.all([this.leader.renew(), this.leases.renew(), this.#register()])
    } catch {
      // Redis away: the connection says so once; leases not renewed in time are dropped by their deadline.
    } finally {
      this.#renewing = false
      const took = performance.now() - started
      if (took > this.leaseMs / 3) {
        log.warn(`replica ${this.replicaId}: renewing its leases took ${Math.round(took)} ms; a lease is lost when this nears ${this.leaseMs} ms (Redis slow, or this process starved of CPU)`, {
          event: "cluster_renewal_slow",
          duration_ms: Math.round(took)
        })
      }
    }
  }
  #renewing = false

  async #upkeep(): Promise<void> {
    if (this.#upkeeping) return
    this.#upkeeping = true
    try {
      this.#peers = await this.replicas()
      this.#ownHeld()
      await this.#claim()
      void this.#rebalance()
    } catch {
      // Redis away: nothing to take now.
    } finally {
      this.#upkeeping = false
    }
  }
  #upkeeping = false

  /** Takes the free leases this replica's fair share allows: the leader's, and its services'. */
  async #claim(): Promise<void> {
    if (this.#ending.signal.aborted) return
    await this.leader.claim([LEADER], 1).catch(() => undefined)
    const host = this.#host
    if (host === undefined || Date.now() < this.#claimAfter) return
    const fields = host.fields()
    const now = Date.now()
    for (const [field, at] of this.#lostAt) if (now - at > this.leaseMs / 2) this.#lostAt.delete(field)
    // In a random order, so that replicas claiming at once do not all try the same services first.
    const alone = this.#peers.length <= 1
    const candidates = shuffled(alone ? fields : fields.filter((f) => !this.#lostAt.has(f)))
    await this.leases.claim(candidates, fairShare(fields.length, this.#peers.length)).catch(() => undefined)
  }

  /** Claims soon (once for many calls in one turn): a service was added, or leases were released. */
  claimSoon(): void {
    if (this.#claimSoon || this.#ending.signal.aborted) return
    this.#claimSoon = true
    setImmediate(() => {
      this.#claimSoon = false
      void this.#claim()
    })
  }

  /** Hands one service over when this replica runs more than its fair share (a replica joined); one at a time. */
  async #rebalance(): Promise<void> {
    const host = this.#host
    if (host === undefined || this.#ending.signal.aborted || this.#handingOver) return
    const owned = this.leases.owned()
    if (owned.length <= fairShare(host.fields().length, this.#peers.length)) return
    const field = owned[Math.floor(Math.random() * owned.length)] as string
    log.info(`replica ${this.replicaId} hands ${field} over (it runs ${owned.length} services, its fair share is fewer)`, { event: "lease_handover", lease: field })
    this.#handingOver = true
    try {
      await this.#handOver([field])
    } catch {
      // Redis away: the lease expires by itself (the service is stopped here already).
    } finally {
      this.#handingOver = false
    }
  }
  #handingOver = false

  /**
   * Stops running services here, then releases their leases (so the next owner never overlaps this
   * one). A service whose connections are not closed within `DRAIN_MS` is released all the same,
   * with a warning, rather than held unrun.
   */
  async #handOver(fields: ReadonlyArray<string>): Promise<void> {
    const host = this.#host
    for (const field of fields) this.#handing.add(field)
    try {
      await Promise.all(
        fields.map(async (field) => {
          // Mirrors at once (a call begun from now on waits for the next owner), while the calls in flight end where they began.
          const face = host?.face(field)
          if (!this.#ending.signal.aborted) face?.getSnapshot().context.connection?.settleOnClose?.(SETTLE_MS, this.#ending.signal)
          face?.send({ type: "DISOWN" })
          let timer: NodeJS.Timeout | undefined
          const late = new Promise<"late">((resolve) => (timer = setTimeout(() => resolve("late"), DRAIN_MS)))
          const ended = await Promise.race([host?.drain(field).then(() => "drained" as const), late])
          clearTimeout(timer)
          if (ended === "late") log.warn(`${field} did not close within ${DRAIN_MS / 1000} s on replica ${this.replicaId}; its lease is released all the same`, { event: "lease_handover_late", lease: field })
        })
      )
      await this.leases.release(fields)
    } finally {
      for (const field of fields) this.#handing.delete(field)
    }
  }
  /** Aborted as the replica leaves or stops: no lease is taken any more, and a hand-over waits no more. */
  readonly #ending = new AbortController()

  /** The services being handed over now (their actors mirror while their leases are still held). */
  readonly #handing = new Set<string>()

  /** Every lease held runs its service here (an OWN lost in a race is sent again). */
  #ownHeld(): void {
    if (this.#ending.signal.aborted) return
    for (const field of this.leases.owned()) {
      if (this.#handing.has(field)) continue
      const face = this.#host?.face(field)
      if (face !== undefined && face.getSnapshot().context.role === "mirror") face.send({ type: "OWN", owner: this.replicaId })
    }
  }

  /** Redis was lost: until it is back, ask the other replicas whether they reach it (outage or partition?). */
  #lost(): void {
    clearInterval(this.#outageTimer)
    this.#outageTimer = setInterval(() => void this.#checkOutage(), this.#questionMs)
    this.#outageTimer.unref()
    void this.#checkOutage()
  }

  /** How often the others are asked during an outage, and how long an answer is waited for (ms). */
  get #questionMs(): number {
    return Math.max(1000, Math.floor(this.leaseMs / 4))
  }

  /** A question to the others is under way (`#checkOutage`): one at a time, its answers applied in order. */
  #asking = false

  /**
   * Whether the leases may be kept while Redis is away: yes when every other replica cannot reach
   * Redis either (an outage: nobody can take a lease, so the services keep running); no when another
   * reaches it (this replica is cut off: it lets its leases expire and stops their services, so that
   * one of those takes over with never two owners), and no when no other replica vouches (none
   * known: one that registered after this replica last read the registry, such as one started at
   * the same time, takes the leases once their keys expire). A "no Redis here" answer is a promise
   * to take none of the leases named for the answering replica's lease time (`reachesRedis`), so
   * those are kept until that time from this question, less the lease margin; the next question
   * (every ttl/4) extends it. While a replica that may reach Redis has not answered, the question is
   * asked again at once and only the promises already given hold, until they run out; then leases
   * past their deadlines go (the safe side). The rules of the answers: `conclude` (outage.ts).
   */
  async #checkOutage(): Promise<void> {
    if (this.#asking) return
    this.#asking = true
    try {
      for (let unanswered = true; unanswered && !this.connection.up && this.#stopping === undefined; ) {
        const asked = Date.now()
        unanswered = await this.#ask()
        // Replicas that refuse at once are not asked more often than every SILENT_PAUSE_MS.
        if (unanswered) await sleep(Math.max(0, asked + SILENT_PAUSE_MS - Date.now()), undefined, { ref: false })
      }
    } finally {
      this.#asking = false
    }
  }

  /**
   * One question to the others (see `#checkOutage`), naming the leases this replica holds (those
   * past their deadline dropped first, `Leases.heldNow`): the promises vouch for those alone, and
   * the replicas asked go on taking any other. True when it settled nothing: no replica answered,
   * or one that may reach Redis did not while the others promised.
   */
  async #ask(): Promise<boolean> {
    const others = this.#peers.filter((p) => p.id !== this.replicaId)
    // One that has not said where it listens yet (it starts) cannot be asked, yet may take leases: missing.
    const peers = others.filter((p) => p.url !== "")
    const asked = Date.now()
    // Leases past their deadline go first, in this turn: a late expiry timer does not leave one to be named and kept on the answers.
    const leases = [...this.leader.heldNow(), ...this.leases.heldNow()]
    const replies = await Promise.all(
      peers.map((p) =>
        this.#forwarder.sendTo(p.url, { op: "redis", field: "", timeoutMs: this.#questionMs, leases }, {}).then(
          (answer): Reply => ({ kind: "answered", answer: answer as RedisAnswer | null }),
          (e: unknown): Reply => (e instanceof NotDelivered && e.refused ? { kind: "refused" } : { kind: "silent" })
        )
      )
    )
    if (this.connection.up) return false
    const conclusion = conclude(others.length, replies)
    if (!conclusion.settled) {
      log.debug(`replica ${this.replicaId} asked ${others.length} replica(s) whether they reach Redis: ${conclusion.missing} did not answer within ${this.#questionMs} ms (or cannot be asked yet)`, {
        event: "cluster_question_unanswered"
      })
    } else {
      const { verdict, promisedMs } = conclusion
      if (verdict !== this.#verdict) this.#say(verdict)
      this.#verdict = verdict
      if (promisedMs === 0) this.#vouched.clear()
      for (const label of promisedMs > 0 ? leases : []) this.#vouched.set(label, Math.max(this.#vouched.get(label) ?? 0, asked + promisedMs - this.leases.margin))
    }
    // Acted on now: no longer vouched for (another replica reaches Redis again, or the promises ran out), leases past their deadline go at once.
    this.leases.expire()
    this.leader.expire()
    return !conclusion.settled
  }

  /** One warning line per verdict of an outage's questions (`#ask`). */
  #say(verdict: Verdict): void {
    const replica = `replica ${this.replicaId}`
    if (verdict === "outage") log.warn(`Redis is unreachable for every replica: ${replica} keeps running its ${this.leases.owned().length} service(s)`, { event: "cluster_outage" })
    else if (verdict === "partitioned") log.warn(`${replica} is cut off from Redis while other replicas reach it: its services stop when their leases expire`, { event: "cluster_partitioned" })
    else {
      log.warn(`${replica} has lost Redis and knows no other replica to vouch that nobody reaches it (it knows none, or they refuse connections; one may have joined since it last read the registry): its services stop when their leases expire`, {
        event: "cluster_partitioned"
      })
    }
  }

  /**
   * Asked by a replica that lost Redis (the `redis` request): whether this one reaches it now. Yes
   * only when a command sent now is answered within `CONFIRM_MS`, so that a reply from before an
   * outage, which this replica's probe has not noticed yet, never makes the asker think it alone is
   * cut off. A no is a promise: this replica takes none of the `leases` the asker named (all, when
   * it named none) for its lease time from now (a claim already sent is given back,
   * src/cluster/leases.ts), so the asker may keep them meanwhile; it takes any other lease as usual,
   * so a Redis that is only slow here (the command answered late) leaves no service unowned. Such a
   * late answer is a warning line.
   */
  async reachesRedis(leases?: ReadonlyArray<string>): Promise<RedisAnswer> {
    const sent = Date.now()
    const time = this.connection.up ? this.connection.client.sendCommand(["TIME"]) : undefined
    if (time !== undefined && (await answeredWithin(time, CONFIRM_MS))) return { up: true }
    const until = Date.now() + this.leaseMs
    this.#quiet.give(leases, until, sent)
    void time?.then(() => this.#answeredLate(Date.now() - sent, leases), () => undefined)
    return { up: false, quietMs: this.leaseMs }
  }

  /** A `TIME` sent on a question came back after the no was given: Redis is slow here, not away (one line a minute at most). */
  #answeredLate(tookMs: number, leases: ReadonlyArray<string> | undefined): void {
    const now = Date.now()
    if (now - this.#lateSaid < LATE_LINE_EVERY_MS) return
    this.#lateSaid = now
    const kept = leases === undefined ? "any lease" : `the asker's ${leases.length} lease(s)`
    log.warn(
      `replica ${this.replicaId} answered a replica that lost Redis that it does not reach Redis either, but Redis answered it after ${tookMs} ms (more than ${CONFIRM_MS}): Redis is slow here, not away; it takes none of ${kept} for ${this.leaseMs} ms from each such answer and takes other services as usual`,
      { event: "cluster_redis_answer_late", duration_ms: tookMs }
    )
  }

  /** A service's lease was taken: run it here (a lease of a service not defined here is given back). */
  #own(field: string): void {
    const face = this.#host?.face(field)
    if (face === undefined) {
      void this.leases.release([field]).catch(() => undefined)
      return
    }
    this.#shownTags.delete(field)
    this.views.rewrite(field)
    face.send({ type: "OWN", owner: this.replicaId })
  }

  /** The store is stopping: no more leases are taken (those held are released by `stop`, once the services are closed). */
  leaving(): void {
    this.#ending.abort()
    this.leases.stopTaking()
    this.leader.stopTaking()
  }

  /** Whether this replica runs a service now. */
  owns(field: string): boolean {
    return this.leases.owns(field)
  }

  /**
   * Connects the cluster to the store's actors: views of other replicas are followed and shown,
   * the stored ones applied, and service leases claimed from now on.
   */
  async attach(host: ReplicaHost): Promise<void> {
    this.#host = host
    await this.views.follow((field, view) => this.#received(field, view))
    await this.#resync()
    this.connection.onReturn(() => void this.#afterReturn())
    this.connection.onLoss(() => this.#lost())
    this.#peers = await this.replicas()
    await this.#claim()
  }

  /** A service was added here: it shows its owner's last view at once, and its lease is claimed. */
  added(field: string): void {
    const view = this.#latest.get(field)
    if (view !== undefined) this.#received(field, view)
    this.claimSoon()
  }

  /** A service was deleted: its owner (this replica, if so) releases its lease and view once its connections are closed. */
  async removed(field: string): Promise<void> {
    this.#latest.delete(field)
    this.#lostAt.delete(field)
    this.#shownTags.delete(field)
    this.#remotes.delete(field)
    if (!this.leases.owns(field)) return
    await this.#host?.drain(field)
    await this.leases.release([field]).catch(() => undefined)
    await this.views.remove(field).catch(() => undefined)
  }

  /** Publishes a view of a service this replica runs (the replicated actor's `publish`). */
  publish(field: string, view: PublishedView, connection: McpConnection | undefined): void {
    if (this.leases.owns(field)) this.views.publish(field, view, connection)
  }

  /** The connection that forwards a service's requests to its owner (the replicated actor's `useRemote`). */
  remote(field: string): RemoteConnection {
    let remote = this.#remotes.get(field)
    if (remote === undefined) this.#remotes.set(field, (remote = new RemoteConnection(field, this.#forwarder, () => this.#latest.get(field)?.facts)))
    return remote
  }

  /** Passes a command only the owner can carry out to the owner (the replicated actor's `forward`). */
  forward(field: string, event: ServiceEvent): void {
    void this.#forwarder.send({ op: "event", field, event, timeoutMs: 5000 }, {}).catch((e: unknown) =>
      log.warn(`${event.type} of ${field} could not be passed to the replica that runs it: ${(e as Error).message}`, { event: "cluster_forward_failed", service: field })
    )
  }

  /** A view published by the owner of `field`: shown by its mirroring actor, in the order views came. */
  #received(field: string, view: WireView): void {
    if (view.owner === this.replicaId || this.leases.owns(field)) return
    const latest = this.#latest.get(field)
    // An older view of the same owner arriving late (the hash read after a message) is not taken.
    if (latest !== undefined && latest.owner === view.owner && latest.view.stateEnteredAt > view.view.stateEnteredAt) return
    this.#latest.set(field, view)
    const previous = this.#applying.get(field) ?? Promise.resolve()
    const next = previous.then(() => this.#show(field, view)).catch((e: unknown) => log.debug(`view of ${field} not shown (${(e as Error).message})`, { event: "cluster_view_failed" }))
    this.#applying.set(field, next)
    void next.then(() => {
      if (this.#applying.get(field) === next) this.#applying.delete(field)
    })
  }

  async #show(field: string, view: WireView): Promise<void> {
    const face = this.#host?.face(field)
    if (face === undefined || this.leases.owns(field)) return
    let tools = face.getSnapshot().context.tools
    let catalog = face.getSnapshot().context.catalog
    if (this.#shownTags.get(field) !== view.catalogTag) {
      const stored = await this.views.catalog(field)
      if (stored !== undefined) {
        tools = stored.tools
        catalog = stored.catalog
        this.#shownTags.set(field, stored.tag)
      }
    }
    // The owner may have changed while the catalog was read; a store that is closing has stopped its actors.
    if (this.leases.owns(field) || this.#host?.face(field) !== face || face.getSnapshot().status !== "active") return
    face.send({ type: "VIEW", view: { ...view.view, tools, catalog }, owner: view.owner } as never)
  }

  /** Reads every stored view again (at attach, and after Redis came back). */
  async #resync(): Promise<void> {
    for (const [field, view] of await this.views.all()) this.#received(field, view)
  }

  /**
   * Redis is back: the leases this replica kept are renewed (or taken back, if Redis lost them)
   * before anyone claims, views missed meanwhile are read, its own published again.
   */
  async #afterReturn(): Promise<void> {
    clearInterval(this.#outageTimer)
    this.#claimAfter = Date.now() + Math.floor(this.leaseMs / 2)
    // Back empty: the generated secret goes back too, before a replica that starts now makes another.
    if (this.options.secret === undefined) await this.connection.client.set(clusterKey(this.options.name, "secret"), this.secret, { condition: "NX" }).catch(() => undefined)
    await this.leases.renew().catch(() => undefined)
    await this.leader.renew().catch(() => undefined)
    this.#vouched.clear()
    this.#verdict = undefined
    await this.#resync().catch(() => undefined)
    for (const field of this.leases.owned()) {
      const face = this.#host?.face(field)
      if (face === undefined) continue
      const snapshot = face.getSnapshot()
      this.views.rewrite(field)
      this.views.publish(field, viewOf(snapshot.context, statusOf(snapshot)), snapshot.context.connection)
    }
    setTimeout(() => this.claimSoon(), Math.floor(this.leaseMs / 2) + 10).unref()
  }

  /** The replica that runs a service when it is another one (undefined: this one, or none now). */
  async ownerOf(field: string): Promise<string | undefined> {
    return this.leases.owns(field) ? undefined : this.#knownOwner(field)
  }

  /** The replica that runs a service as its last view says, else its lease holder in Redis (undefined: none known, Redis away, or this one). */
  async #knownOwner(field: string): Promise<string | undefined> {
    let owner = this.#latest.get(field)?.owner
    if (owner === undefined || owner === this.replicaId) owner = await this.#leaseHolder(field).catch(() => undefined)
    return owner === this.replicaId ? undefined : owner
  }

  /** The holder of a service's lease in Redis now (undefined: free); rejects when Redis does not answer. */
  async #leaseHolder(field: string): Promise<string | undefined> {
    return (await this.connection.client.get(this.leases.key(field))) ?? undefined
  }

  /** A replica's URL in the registry in Redis now (undefined: not registered); rejects when Redis does not answer. */
  async #registeredUrl(replica: string): Promise<string | undefined> {
    const entry = await this.connection.client.get(this.#replicaKey(replica))
    return entry === null ? undefined : urlOfEntry(entry)
  }

  /**
   * Where a request for `field` is sent (`Forwarder.send`): this replica's own route when it runs the
   * service (it took it over while the request was on its way: the route runs it on the live
   * connection); else the owner of its last view, at the URL that view carries (known without Redis);
   * else the lease holder. `again` (the last answer did not take the request: its replica is gone, or
   * no longer owns the service): the lease holder as Redis has it now, at its URL in the registry
   * now, and the view only when Redis does not answer. None while this replica still holds the lease
   * but its own route cannot run the request: it hands the service over (its actor mirrors until the
   * lease is released: the route would answer "not run" to every try), or it is leaving or stopping
   * (its actor still runs, but the server stopped listening before the store was released, which is
   * when it starts leaving, and its actors are stopped next: every try would be refused). The lease
   * holder is asked again once the lease is released (by the hand-over once the service is closed
   * here, by `stop` once every service is).
   */
  async #ownerUrl(field: string, again: boolean): Promise<string | undefined> {
    if (this.leases.owns(field)) {
      if (this.#handing.has(field) || this.#ending.signal.aborted) return undefined
      if (this.#advertiseUrl !== "") return this.#advertiseUrl
      throw new McpRequestError("unavailable", `replica ${this.replicaId} took ${field} over while the request was on its way, and it does not listen; try again`)
    }
    const latest = this.#latest.get(field)
    const viewed = latest !== undefined && latest.owner !== this.replicaId && latest.url !== undefined && latest.url !== "" ? latest.url : undefined
    if (again) {
      const holder = await this.#holderUrl(field)
      if (holder !== STALE) return holder
    }
    if (viewed !== undefined) return viewed
    const owner = await this.#knownOwner(field)
    return owner === undefined ? undefined : this.#urlOf(owner)
  }

  /**
   * The URL of the holder of `field`'s lease as Redis has it now, from its registry entry now
   * (undefined: the lease is free or being taken here, or its holder has left the registry);
   * `STALE` when Redis did not answer. One lookup per service serves every retry that asks while it
   * runs and for `RETRY_MS` from its start (the time between two tries), so the requests in flight
   * while a service moves cost Redis two reads per service per try, not per request.
   */
  #holderUrl(field: string): Promise<string | undefined | typeof STALE> {
    const shared = this.#holderLookups.get(field)
    if (shared !== undefined) return shared
    const started = performance.now()
    const lookup = this.#lookUpHolder(field)
    this.#holderLookups.set(field, lookup)
    void lookup.then(() => {
      const forget = () => {
        if (this.#holderLookups.get(field) === lookup) this.#holderLookups.delete(field)
      }
      const left = started + RETRY_MS - performance.now()
      if (left <= 0) forget()
      else setTimeout(forget, left).unref()
    })
    return lookup
  }
  /** The lookups of lease holders under way or just made, by service (`#holderUrl`). */
  readonly #holderLookups = new Map<string, Promise<string | undefined | typeof STALE>>()

  async #lookUpHolder(field: string): Promise<string | undefined | typeof STALE> {
    try {
      const holder = await this.#leaseHolder(field)
      return holder === undefined || holder === this.replicaId ? undefined : await this.#registeredUrl(holder)
    } catch {
      return STALE
    }
  }

  /** Where a replica is reached: the registry as the keeper last read it (so it is found while Redis is away), else as it is now. */
  async #urlOf(replica: string): Promise<string | undefined> {
    const known = this.#peers.find((p) => p.id === replica)?.url
    return known !== undefined && known !== "" ? known : this.#registeredUrl(replica).catch(() => undefined)
  }

  /**
   * Sends a request to one replica by its id (the holder of a held call); a `NotDelivered` when the
   * registry has no such replica (it left, or never was).
   */
  async sendToReplica(replica: string, request: Parameters<Forwarder["sendTo"]>[1], options: SendOptions): Promise<unknown> {
    const url = await this.#urlOf(replica)
    if (url === undefined) throw new NotDelivered(`replica ${replica} is not in the cluster`)
    return this.#forwarder.sendTo(url, request, options)
  }

  /** Writes the definitions to the snapshot file (atomically; one write at a time; a failure is a warning). */
  #writeSnapshot(): void {
    const path = snapshotPath(this.definitions.path)
    const text = serialize(this.definitions.raw() as JsonObject)
    this.#snapshots = this.#snapshots.then(() =>
      writeAtomically(path, text).then(
        () => undefined,
        (e: unknown) => log.warn(`cluster snapshot ${path} cannot be written (${(e as Error).message})`, { event: "cluster_snapshot_failed", file: path })
      )
    )
  }

  /** Whether a replica is in the registry now (its entry renewed within its lease). */
  async alive(replicaId: string): Promise<boolean> {
    if (replicaId === this.replicaId) return true
    return (await this.connection.client.exists(this.#replicaKey(replicaId))) === 1
  }

  /** The live replicas (this one included), as the registry holds them now. */
  async replicas(): Promise<ReadonlyArray<ReplicaEntry>> {
    const client = this.connection.client
    const keys: string[] = []
    for await (const batch of client.scanIterator({ MATCH: this.#replicaKey("*"), COUNT: 100 })) keys.push(...batch)
    if (keys.length === 0) return []
    const values = await client.mGet(keys)
    return values.flatMap((v) => {
      if (v === null) return []
      try {
        return [JSON.parse(v) as ReplicaEntry]
      } catch {
        return []
      }
    })
  }

  /** Leaves the cluster: the registry entry is removed (best effort), the reader and connections closed. Idempotent. */
  stop(): Promise<void> {
    this.leaving()
    this.#stopping ??= (async () => {
      clearInterval(this.#heartbeat)
      clearInterval(this.#outageTimer)
      this.#unwatch?.()
      const reading = this.definitions.close()
      this.views.close()
      this.leader.close()
      this.leases.close()
      if (this.connection.up) {
        // The store closed its connections first: the next owners take over at once.
        await this.leases.release().catch(() => undefined)
        await this.leader.release().catch(() => undefined)
        await this.connection.client.del(this.#replicaKey(this.replicaId)).catch(() => undefined)
      }
      await this.#snapshots
      this.#forwarder.close()
      this.connection.close()
      await reading
    })()
    return this.#stopping
  }
}

/** What `#holderUrl` answers when Redis did not answer. */
const STALE = Symbol("stale")

/** The URL of a registry entry (undefined: not listening yet, or unreadable). */
const urlOfEntry = (entry: string): string | undefined => {
  try {
    const url = (JSON.parse(entry) as ReplicaEntry).url
    return typeof url === "string" && url !== "" ? url : undefined
  } catch {
    return undefined
  }
}

/** A copy of `items` in a random order. */
const shuffled = <T>(items: ReadonlyArray<T>): T[] => {
  const out = [...items]
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    ;[out[i], out[j]] = [out[j] as T, out[i] as T]
  }
  return out
}

/** The cluster secret kept in Redis: generated by the first replica that needs it (SET NX), read by the others. */
const sharedSecret = async (connection: ClusterConnection, cluster: string): Promise<string> => {
  const key = clusterKey(cluster, "secret")
  await connection.client.set(key, randomBytes(32).toString("base64url"), { condition: "NX" })
  const secret = await connection.client.get(key)
  if (secret === null) throw new Error(`cluster ${cluster}: the shared secret could not be read back from Redis`)
  return secret
}
