/**
 * The composition root of the store: one layer graph, the store on the capabilities of one store
 * on its services file (src/runtime/store-layers.ts) or of a replica
 * (src/cluster/replica-layers.ts), chosen here once, then the store's parts
 * (src/runtime/store-parts.ts), the host its operations see on them (src/runtime/store-host.ts),
 * the store and its operations (src/runtime/operations.ts). Shutdown follows the layers: the store
 * and its parts (actors, connections) first, then the records and tokens, then the cluster,
 * whatever the mode; a failed start releases what it had acquired.
 */
import { Cause, Context, Effect, Exit, Layer, Option, Scope } from "effect"
import { ClusterService, ReplicaLayer } from "../cluster/replica-layers.js"
import { ProcessLedgerLive, ServicesFileLive, StandaloneLayer, StoreConfigLive, StoreLive, TracingLive } from "../runtime/store-layers.js"
import type { AsyncResults, CreateStoreOptions, Credentials, Definitions, Pins, Records, Replication, StoreConfig, Tokens, Tracing } from "../runtime/services.js"
import { StoreService, type Store } from "../runtime/store.js"
import type { StorePartServices } from "../runtime/store-parts.js"
import type { StoreHostService } from "../runtime/store-host.js"
import { OperationsLive, type OperationServices } from "../runtime/operations.js"

/** What the store's layer graph provides (the `ClusterService` only in replica mode): the capabilities, the store's parts, the store and its operations. */
export type StoreLayerServices = OperationServices | StoreService | StoreHostService | StorePartServices | Definitions | Records | AsyncResults | Tokens | Pins | Credentials | Replication | Tracing

/**
 * The store's layer graph on a layer of its settings: standalone, or a replica when the settings'
 * `options.cluster` is set (`replica`, known before the graph is built).
 */
export const storeLayerOn = <E, R>(config: Layer.Layer<StoreConfig, E, R>, replica: boolean): Layer.Layer<StoreLayerServices | StoreConfig, E, R> => {
  const base = Layer.mergeAll(ServicesFileLive, TracingLive, ProcessLedgerLive).pipe(Layer.provideMerge(config))
  const chosen = replica ? ReplicaLayer : StandaloneLayer
  const graph = OperationsLive.pipe(Layer.provideMerge(StoreLive), Layer.provideMerge(chosen), Layer.provideMerge(base))
  // A replica's store runs: from now on a command to a Redis that stopped answering is refused at once.
  return replica ? Layer.tap(graph, (context) => Effect.sync(() => Option.map(Context.getOption(context, ClusterService), (cluster) => cluster.connection.started()))) : graph
}

/** The store's layer graph for `options`: standalone, or a replica when `options.cluster` is set. */
export const storeLayer = (options: CreateStoreOptions): Layer.Layer<StoreLayerServices | StoreConfig> =>
  storeLayerOn(StoreConfigLive(options), options.cluster !== undefined)

/** The cluster of a store built by `storeLayer`, in replica mode. */
export const clusterOf = Effect.serviceOption(ClusterService)

/**
 * Creates a store: opens the services file (or joins the cluster), starts the actors and connects
 * every service. `store.stop()` releases the whole graph. A failed start rejects with its cause,
 * once what was acquired is released.
 */
export const createStore = async (options: CreateStoreOptions): Promise<Store> => {
  const scope = Effect.runSync(Scope.make())
  const exit = await Effect.runPromiseExit(Layer.buildWithScope(storeLayer(options), scope))
  if (Exit.isFailure(exit)) {
    await Effect.runPromise(Scope.close(scope, exit))
    throw Cause.squash(exit.cause)
  }
  const store = Context.get(exit.value, StoreService)
  store.releaseWith(() => Effect.runPromise(Scope.close(scope, Exit.void)))
  return store
}
