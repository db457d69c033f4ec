/**
 * Replica mode as one object the store owns (docs/replicas.md): the Redis connections, the
 * cluster secret, this replica's entry in the registry of live replicas, the shared definitions,
 * and the `leader` lease: the leader writes the definitions to a snapshot file beside the services
 * file after each change, for backups. `Cluster.start` acquires them in order and releases what it
 * got when a step fails; `stop` releases everything (the keeper's timer, the lease, the stream
 * reader, the connections, the registry entry).
 */
import { randomBytes, randomUUID } from "node:crypto"
import { hostname } from "node:os"
import type { ClusterOptions } from "../config/options.js"
import { writeAtomically } from "../config/atomic-write.js"
import { serialize, type JsonObject, type ServicesConfig } from "../config/services-document.js"
import { log } from "../runtime/log.js"
import { ClusterConnection, showRedisUrl } from "./connection.js"
import { RedisDefinitions } from "./definitions.js"
import { clusterKey } from "./keys.js"
import { Leases, releasedChannel } from "./leases.js"

/** The lease of the replica that writes the snapshot file. */
const LEADER = "leader"

/** The snapshot file of a services file: what the leader writes after each change of the definitions. */
export const snapshotPath = (servicesFile: string): string => `${servicesFile}.cluster-snapshot.json`

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
  readonly leases: Leases
  #unwatch: (() => void) | undefined
  /** Snapshot writes, one at a time. */
  #snapshots: Promise<void> = Promise.resolve()

  private constructor(
    readonly options: ClusterOptions,
    readonly connection: ClusterConnection,
    /** The shared secret of the replicas' internal requests. */
    readonly secret: string,
    readonly definitions: RedisDefinitions
  ) {
    this.#advertiseUrl = options.advertiseUrl ?? ""
    this.leases = new Leases(connection.client, { cluster: options.name, replicaId: this.replicaId, ttlMs: this.leaseMs }, {
      taken: (label) => {
        if (label === LEADER) this.#writeSnapshot()
      },
      lost: () => undefined
    })
  }

  /** The lease time to live (ms). */
  get leaseMs(): number {
    return this.options.leaseMs ?? 5000
  }

  /**
   * Connects to the cluster's Redis, seeds an empty cluster from `initial` (the services file),
   * reads the definitions and registers this replica. Rejects with a clear message when Redis
   * cannot be reached at start.
   */
  static async start(options: ClusterOptions, servicesFile: string, initial: ServicesConfig): Promise<Cluster> {
    const connection = await ClusterConnection.open(options.redisUrl)
    try {
      const secret = options.secret ?? (await sharedSecret(connection, options.name))
      const definitions = await RedisDefinitions.open(connection, options.name, servicesFile, initial)
      const cluster = new Cluster(options, connection, secret, definitions)
      await cluster.#register()
      cluster.#unwatch = definitions.onChange(() => {
        if (cluster.leases.owns(LEADER)) cluster.#writeSnapshot()
      })
      await connection.subscriber.subscribe(releasedChannel(options.name), () => void cluster.#claim())
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

  /** One turn of the keeper: the registry entry refreshed, the leases renewed, free ones taken. */
  async #keep(): Promise<void> {
    try {
      await this.#register()
      await this.leases.renew()
      await this.#claim()
    } catch {
      // Redis away: the connection says so once; leases not renewed in time are dropped by their deadline.
    }
  }

  async #claim(): Promise<void> {
    if (this.#stopping !== undefined) return
    await this.leases.claim([LEADER], 1).catch(() => undefined)
  }

  /** Writes the definitions to the snapshot file (atomically; one write at a time; a failure is a warning). */
  #writeSnapshot(): void {
    const path = snapshotPath(this.definitions.path)
    const text = serialize(this.definitions.raw() as JsonObject)
    this.#snapshots = this.#snapshots.then(() =>
      writeAtomically(path, text).catch((e: unknown) =>
        log.warn(`cluster snapshot ${path} cannot be written (${(e as Error).message})`, { event: "cluster_snapshot_failed", file: path })
      )
    )
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
    this.#stopping ??= (async () => {
      clearInterval(this.#heartbeat)
      this.#unwatch?.()
      const reading = this.definitions.close()
      this.leases.close()
      if (this.connection.up) {
        await this.leases.release().catch(() => undefined)
        await this.connection.client.del(this.#replicaKey(this.replicaId)).catch(() => undefined)
      }
      await this.#snapshots
      this.connection.close()
      await reading
    })()
    return this.#stopping
  }
}

/** The cluster secret kept in Redis: generated by the first replica that needs it (SET NX), read by the others. */
const sharedSecret = async (connection: ClusterConnection, cluster: string): Promise<string> => {
  const key = clusterKey(cluster, "secret")
  await connection.client.set(key, randomBytes(32).toString("base64url"), { condition: "NX" })
  const secret = await connection.client.get(key)
  if (secret === null) throw new Error(`cluster ${cluster}: the shared secret could not be read back from Redis`)
  return secret
}
