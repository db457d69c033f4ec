/**
 * Replica mode as layers (docs/replicas.md): the same capabilities as one store on its file
 * (src/runtime/services.ts), backed by the cluster's Redis. The cluster itself is the first
 * resource acquired and the last released: the records and tokens use its Redis client, and its
 * leases are given up only once the store has closed its services' connections.
 */
import { Context, Effect, Layer } from "effect"
import { assign } from "xstate"
import { serviceField } from "../domain/replicas.js"
import { scopeLabel } from "../domain/service-definition.js"
import { replicatedServiceMachine } from "../machines/replicated.js"
import type { ServiceEvent } from "../machines/service.js"
import { logCrash } from "../runtime/adapter.js"
import {
  AsyncResults,
  Credentials,
  Definitions,
  Pins,
  Records,
  Replication,
  ServicesFileSource,
  StoreConfig,
  Tokens,
  type LiveServiceMachine,
  type ReplicationApi
} from "../runtime/services.js"
import { Cluster } from "./cluster.js"
import { heldCallsOf } from "./held-calls.js"
import { sharedApprovals } from "./shared-approvals.js"
import { answeredByReplica, NotDelivered } from "./forward.js"
import { RedisRecords, type ClusterData } from "../records/redis-records.js"
import { RedisTokenStore } from "../config/redis-token-vault.js"
import { RedisAsyncResults } from "../records/redis-async-results.js"
import { RedisToolPins } from "../config/redis-pins.js"
import { RedisCredentials } from "../config/redis-credentials.js"
import type { AsyncCallEntry } from "../records/async-results.js"

/** The cluster this store is a replica of (present only in replica mode). */
export class ClusterService extends Context.Tag("mcp-store/Cluster")<ClusterService, Cluster>() {}

/**
 * Joins the cluster (its Redis reached, an empty cluster seeded from the services file); leaves it
 * on release. Fails the start when Redis cannot be reached.
 */
export const ClusterLive: Layer.Layer<ClusterService, never, StoreConfig | ServicesFileSource> = Layer.scoped(
  ClusterService,
  Effect.gen(function* () {
    const config = yield* StoreConfig
    const file = yield* ServicesFileSource
    const options = config.options.cluster
    if (options === undefined) return yield* Effect.dieMessage("replica mode without cluster options")
    return yield* Effect.acquireRelease(
      Effect.promise(() => Cluster.start(options, file.path, file.read(), config.limits.maxMessageBytes)),
      (cluster) => Effect.promise(() => cluster.stop())
    )
  })
)

/** What the records and tokens keep in the cluster's Redis, on its commands client. */
const clusterData = (cluster: Cluster): ClusterData => ({ client: cluster.connection.client, cluster: cluster.options.name })

/** The definitions are the cluster's (shared by every replica). */
export const DefinitionsFromCluster: Layer.Layer<Definitions, never, ClusterService> = Layer.effect(
  Definitions,
  Effect.map(ClusterService, (cluster) => cluster.definitions)
)

/** The records in the cluster's Redis; closed on release (before the cluster's client). */
export const RecordsFromRedis: Layer.Layer<Records, never, ClusterService | StoreConfig> = Layer.scoped(
  Records,
  Effect.gen(function* () {
    const cluster = yield* ClusterService
    const config = yield* StoreConfig
    return yield* Effect.acquireRelease(
      Effect.promise(() => RedisRecords.open(clusterData(cluster), config.records)),
      (records) => Effect.promise(() => records.close())
    )
  })
)

/** The asynchronous calls in the cluster's Redis: any replica reads them; a call whose replica is gone reads `interrupted`. */
export const AsyncResultsFromRedis: Layer.Layer<AsyncResults, never, ClusterService | StoreConfig> = Layer.effect(
  AsyncResults,
  Effect.gen(function* () {
    const cluster = yield* ClusterService
    const config = yield* StoreConfig
    return new RedisAsyncResults(clusterData(cluster), config.asyncResults, { alive: (id) => cluster.alive(id) })
  })
)

/** The OAuth tokens in the cluster's Redis; closed on release (before the cluster's client). */
export const TokensFromRedis: Layer.Layer<Tokens, never, ClusterService> = Layer.scoped(
  Tokens,
  Effect.flatMap(ClusterService, (cluster) =>
    Effect.acquireRelease(
      Effect.promise(() => RedisTokenStore.open(clusterData(cluster))),
      (tokens) => Effect.promise(() => tokens.close())
    )
  )
)

/** The pinned tool definitions in the cluster's Redis, shared by every replica. */
export const PinsFromRedis: Layer.Layer<Pins, never, ClusterService> = Layer.effect(
  Pins,
  Effect.map(ClusterService, (cluster) => new RedisToolPins(clusterData(cluster)))
)

/**
 * The per-user credentials in the cluster's Redis, sealed under a sub-key of MCPSTORE_SECRET_KEY and
 * shared by every replica; stops following their changes on release (before the cluster's clients close).
 */
export const CredentialsFromRedis: Layer.Layer<Credentials, never, ClusterService> = Layer.scoped(
  Credentials,
  Effect.flatMap(ClusterService, (cluster) =>
    Effect.acquireRelease(
      Effect.promise(() => RedisCredentials.open(cluster.connection, cluster.options.name)),
      (credentials) => Effect.promise(() => credentials.close())
    )
  )
)

/** How long a replica has to start or cancel an asynchronous call it runs, when another replica asks. */
const ASYNC_CANCEL_MS = 10_000

/** The store's services replicated through the cluster: leases, views and forwarding, and held calls found on any replica. */
export const clusterReplication = (cluster: Cluster): ReplicationApi => ({
  shared: true,
  serviceMachine: (live) => replicatedMachine(cluster, live) as unknown as LiveServiceMachine,
  attach: (host) => cluster.attach(host),
  added: (scope, name) => cluster.added(serviceField(scope, name)),
  removed: (scope, name) => cluster.removed(serviceField(scope, name)),
  leaving: () => cluster.leaving(),
  replicaId: cluster.replicaId,
  cancelAsyncOn: async (replica, call, scope, owner) => {
    const answer = (await cluster.sendToReplica(replica, { op: "async_cancel", field: "", call, scope, owner, timeoutMs: ASYNC_CANCEL_MS }, {})) as { call?: AsyncCallEntry | null } | null
    return answer?.call ?? undefined
  },
  ownerOf: (scope, name) => cluster.ownerOf(serviceField(scope, name)),
  taskEndedOn: async (replica, relay, task) => {
    try {
      await cluster.sendToReplica(replica, { op: "task_ended", field: "", relay, task, timeoutMs: ASYNC_CANCEL_MS }, {})
    } catch (e) {
      // A holder no longer in the cluster recorded the call at its stop: nothing to tell.
      if (!(e instanceof NotDelivered)) throw e
    }
  },
  startAsyncOn: async (replica, scope, name, start) => {
    let answer: { call?: AsyncCallEntry; refused?: string } | null
    try {
      answer = (await cluster.sendToReplica(replica, { op: "async_start", field: serviceField(scope, name), scope: scopeLabel(scope), ...start, timeoutMs: ASYNC_CANCEL_MS }, {})) as typeof answer
    } catch (e) {
      // Never reached that replica, or answered there without the call (its result comes only once started): it may run here.
      if (e instanceof NotDelivered || answeredByReplica(e)) return { notStarted: e instanceof Error ? e.message : String(e) }
      throw e
    }
    if (answer?.call !== undefined) return answer.call
    return { refused: answer?.refused ?? `replica ${replica} did not start the call` }
  },
  held: heldCallsOf(cluster),
  approvals: sharedApprovals(cluster)
})

export const ClusterReplication: Layer.Layer<Replication, never, ClusterService> = Layer.effect(Replication, Effect.map(ClusterService, clusterReplication))

/**
 * The replicated service machine (src/machines/replicated.ts) on a cluster: it runs `live` while
 * this replica owns the service, forwards to the owner otherwise, and publishes what it runs.
 */
const replicatedMachine = (cluster: Cluster, live: LiveServiceMachine) =>
  replicatedServiceMachine.provide({
    actors: { service: live },
    actions: {
      useRemote: assign(({ context }) => ({ connection: cluster.remote(serviceField(context.scope, context.name)) })),
      forward: ({ context, event }) => cluster.forward(serviceField(context.scope, context.name), event as ServiceEvent),
      publish: ({ context, event }) => {
        if (event.type === "VIEW" && event.local === true) cluster.publish(serviceField(context.scope, context.name), event.view, event.connection)
      },
      reportCrash: logCrash
    }
  })

/** The capabilities of a replica: the cluster, and the definitions, records, tokens and replication on it. */
export const ReplicaLayer: Layer.Layer<ClusterService | Definitions | Records | AsyncResults | Tokens | Pins | Credentials | Replication, never, StoreConfig | ServicesFileSource> = Layer.mergeAll(
  DefinitionsFromCluster,
  RecordsFromRedis,
  AsyncResultsFromRedis,
  TokensFromRedis,
  PinsFromRedis,
  CredentialsFromRedis,
  ClusterReplication
).pipe(Layer.provideMerge(ClusterLive))
