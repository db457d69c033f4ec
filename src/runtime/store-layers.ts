/**
 * The store's layers on the local disk (one store on its services file) and the store layer
 * itself, which runs the actors on whichever capabilities it is given. Each resource is acquired
 * with its release, so a failed start releases what was acquired, in reverse order, and a stop
 * releases the store (actors, connections) before the records and tokens it writes to.
 */
import { Context, Effect, ExecutionStrategy, Exit, Layer, Scope } from "effect"
import { resolveStoreLimits, type StoreLimits } from "../config/options.js"
import { ServicesFile } from "../config/services-file.js"
import { defaultMonitoring } from "../domain/settings.js"
import { ToolRecords } from "../records/tool-records.js"
import { AsyncResultsFile } from "../records/async-results.js"
import { TokenVault, type TokenStore } from "../config/token-vault.js"
import { ProcessLedgerFile } from "../config/process-ledger.js"
import { ToolPinsFile } from "../config/pins-file.js"
import { CredentialsFile } from "../config/credentials-file.js"
import {
  AsyncResults,
  Credentials,
  Definitions,
  noReplication,
  Pins,
  Processes,
  Records,
  Replication,
  ServicesFileSource,
  StoreConfig,
  Tokens,
  Tracing,
  type CreateStoreOptions,
  type StoreSettings
} from "./services.js"
import { Store, StoreService } from "./store.js"
import {
  ActorSystemService,
  ApprovalsService,
  AsyncCallsService,
  ConnectionsService,
  HeldCallsService,
  InspectionService,
  LifecycleLogService,
  StorePartsLive,
  ProgressEventsService,
  TaskRelaysService,
  ToolPinsService,
  ToolSearchService,
  UserCredentialsService,
  WaitersService,
  type StorePartServices
} from "./store-parts.js"
import { StoreHostLive, StoreHostService } from "./store-host.js"
import { noTracer, type Tracer, type TracingOptions } from "../logging/tracing.js"

/** The options of `createStore` with every default applied. */
export const storeSettings = (options: CreateStoreOptions): StoreSettings => {
  const limits: StoreLimits = { ...resolveStoreLimits({}), ...options.limits }
  return {
    options,
    settings: defaultMonitoring(options.monitoring ?? {}),
    limits,
    records: {
      maxFileSizeMb: options.toolRecordMaxFileSize ?? 30,
      retentionDays: options.toolRecordRetentionDays ?? 7,
      maxValueBytes: limits.toolRecordMaxValueBytes
    },
    asyncResults: { maxFinished: limits.maxAsyncResults, retentionSeconds: limits.asyncResultRetentionSeconds, maxBytes: limits.asyncResultsMaxBytes }
  }
}

/** The store's options, resolved. */
export const StoreConfigLive = (options: CreateStoreOptions): Layer.Layer<StoreConfig> => Layer.succeed(StoreConfig, storeSettings(options))

/** The services file, opened (created when missing); a file that cannot be read fails the start. */
export const ServicesFileLive: Layer.Layer<ServicesFileSource, never, StoreConfig> = Layer.effect(
  ServicesFileSource,
  Effect.flatMap(StoreConfig, (config) => Effect.promise(() => ServicesFile.open(config.options.mcpConfigFile)))
)

/** The definitions are the services file's. */
export const DefinitionsFromFile: Layer.Layer<Definitions, never, ServicesFileSource> = Layer.effect(Definitions, ServicesFileSource)

/** A file of the store's beside the services file (`open` is given the services file's path), closed on release. */
const fileBeside = <A>(open: (servicesPath: string) => Promise<A>, close: (file: A) => Promise<unknown>) =>
  Effect.flatMap(Definitions, (definitions) =>
    Effect.acquireRelease(
      Effect.promise(() => open(definitions.path)),
      (file) => Effect.promise(() => close(file))
    )
  )

/** The records in their file beside the services file; closed (flushed) on release. */
const openRecords = Effect.flatMap(StoreConfig, (config) => fileBeside((path) => ToolRecords.open(path, config.records), (records) => records.close()))
export const RecordsFromFile: Layer.Layer<Records, never, StoreConfig | Definitions> = Layer.scoped(Records, openRecords)

/** The asynchronous calls in their file beside the services file; the last writes awaited on release. */
const openAsyncResults = Effect.flatMap(StoreConfig, (config) => fileBeside((path) => AsyncResultsFile.open(path, config.asyncResults), (results) => results.close()))
export const AsyncResultsFromFile: Layer.Layer<AsyncResults, never, StoreConfig | Definitions> = Layer.scoped(AsyncResults, openAsyncResults)

/** The OAuth tokens in their encrypted file beside the services file; closed on release. */
const openTokens = fileBeside((path): Promise<TokenStore> => TokenVault.open(path), async (vault) => vault.close?.())
export const TokensFromFile: Layer.Layer<Tokens, never, Definitions> = Layer.scoped(Tokens, openTokens)

/**
 * The store's process ledger beside the services file, opened once the local services' processes a
 * killed store left running there are ended; removed on release, after the store has ended its own.
 */
export const ProcessLedgerLive: Layer.Layer<Processes, never, StoreConfig> = Layer.scoped(
  Processes,
  Effect.flatMap(StoreConfig, (config) =>
    Effect.acquireRelease(
      Effect.promise(() => ProcessLedgerFile.open(config.options.mcpConfigFile)),
      (ledger) => Effect.promise(() => ledger.close())
    )
  )
)

/** The pinned tool definitions in their file beside the services file; the last write awaited on release. */
const openPins = fileBeside((path) => ToolPinsFile.open(path), (pins) => pins.close())
export const PinsFromFile: Layer.Layer<Pins, never, Definitions> = Layer.scoped(Pins, openPins)

/** The per-user credentials in their encrypted file beside the services file (each change written as it is made). */
const openCredentials = Effect.flatMap(Definitions, (definitions) => Effect.promise(() => CredentialsFile.open(definitions.path)))
export const CredentialsFromFile: Layer.Layer<Credentials, never, Definitions> = Layer.effect(Credentials, openCredentials)

/** The tracer for `options`: the OTLP exporter (its SDK loaded now, in a chunk of its own), or `noTracer`. */
const startTracing = async (options: TracingOptions | undefined): Promise<Tracer> => {
  // OTEL_SDK_DISABLED=true turns the SDK off, as the OpenTelemetry configuration says.
  if (options === undefined || process.env["OTEL_SDK_DISABLED"]?.trim().toLowerCase() === "true") return noTracer
  const { otlpTracer } = await import("../logging/otlp.js")
  return otlpTracer(options)
}

/**
 * The tracer: the OTLP exporter when the options ask for traces (its SDK loaded then, not before),
 * else `noTracer`. Released after the store, with a bounded last export.
 */
export const TracingLive: Layer.Layer<Tracing, never, StoreConfig> = Layer.scoped(
  Tracing,
  Effect.flatMap(StoreConfig, (config) =>
    Effect.acquireRelease(
      Effect.promise(() => startTracing(config.options.tracing)),
      (tracer) => Effect.promise(() => tracer.shutdown())
    )
  )
)

/** One store on its own: nothing is replicated. */
export const NoReplication: Layer.Layer<Replication> = Layer.succeed(Replication, noReplication)

/** The capabilities of one store on its services file (the definitions, records, tokens, credentials and no replication). */
export const StandaloneLayer: Layer.Layer<Definitions | Records | AsyncResults | Tokens | Pins | Credentials | Replication, never, StoreConfig | ServicesFileSource> = Layer.scopedContext(
  // As `Layer.mergeAll(RecordsFromFile, ..., NoReplication).pipe(Layer.provideMerge(DefinitionsFromFile))`
  // would build it (the files opened together, each in a scope of its own, released together), in
  // one layer: a layer each cost Effect more than opening the files.
  Effect.gen(function* () {
    const definitions = yield* ServicesFileSource
    const together = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.parallel)
    const own = <A, R>(open: Effect.Effect<A, never, R>) =>
      Effect.flatMap(Scope.fork(together, ExecutionStrategy.sequential), (scope) => Scope.extend(open, scope))
    const [records, results, tokens, pins, credentials] = yield* Effect.all(
      [own(openRecords), own(openAsyncResults), own(openTokens), own(openPins), own(openCredentials)],
      { concurrency: "unbounded" }
    ).pipe(Effect.provideService(Definitions, definitions))
    return Context.make(Definitions, definitions).pipe(
      Context.add(Records, records),
      Context.add(AsyncResults, results),
      Context.add(Tokens, tokens),
      Context.add(Pins, pins),
      Context.add(Credentials, credentials),
      Context.add(Replication, noReplication)
    )
  })
)

/**
 * The store itself, once its parts are acquired: its actors started, every service of the
 * definitions loaded, the replication attached (replica mode); on release (or when the attach
 * fails), the change under way ended and the replication told it is leaving, before the parts are
 * released.
 */
const StoreCoreLive: Layer.Layer<StoreService, never, StoreConfig | Definitions | Records | Replication | Tracing | StorePartServices | StoreHostService> = Layer.scoped(
  StoreService,
  Effect.gen(function* () {
    const parts = {
      config: yield* StoreConfig,
      definitions: yield* Definitions,
      records: yield* Records,
      replication: yield* Replication,
      tracer: yield* Tracing,
      inspection: yield* InspectionService,
      connections: yield* ConnectionsService,
      credentials: yield* UserCredentialsService,
      pins: yield* ToolPinsService,
      system: yield* ActorSystemService,
      tasks: yield* TaskRelaysService,
      held: yield* HeldCallsService,
      approvals: yield* ApprovalsService,
      asyncCalls: yield* AsyncCallsService,
      waiters: yield* WaitersService,
      progress: yield* ProgressEventsService,
      toolSearch: yield* ToolSearchService,
      host: yield* StoreHostService
    }
    yield* LifecycleLogService // listening before the actors start
    const store = yield* Effect.acquireRelease(
      Effect.sync(() => Store.start(parts)),
      (store) => Effect.promise(() => store.release())
    )
    if (parts.replication.shared) {
      // Replica mode: the changes made through the other replicas are applied as a reload is, and
      // the services' leases decide which replica runs each.
      store.watchFile()
      yield* Effect.promise(() => parts.replication.attach(store.replicaHost()))
    }
    return store
  })
)

/**
 * The store, its parts (src/runtime/store-parts.ts) and the host its operations see on them
 * (src/runtime/store-host.ts), built in a scope of their own within the graph's: released in the
 * graph's order (before the records, tokens and cluster they use), or alone by `store.stop()` when
 * the graph belongs to someone else (the HTTP server's).
 */
export const StoreLive: Layer.Layer<StoreService | StoreHostService | StorePartServices, never, StoreConfig | Definitions | Records | AsyncResults | Tokens | Pins | Credentials | Replication | Tracing | Processes> =
  Layer.scopedContext(
    Effect.gen(function* () {
      const own = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.sequential)
      const context = yield* Layer.buildWithScope(StoreCoreLive.pipe(Layer.provideMerge(StoreHostLive), Layer.provideMerge(StorePartsLive)), own)
      Context.get(context, StoreService).releaseWith(() => Effect.runPromise(Scope.close(own, Exit.void)))
      return context
    })
  )
