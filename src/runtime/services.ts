/**
 * The store's capabilities as Effect services: each is a tag here, its implementations are layers
 * (the file-backed ones in src/runtime/store-layers.ts, the Redis-backed ones of replica mode in
 * src/cluster/replica-layers.ts), and the composition root (src/composition/layer-graph.ts) picks one set. The runtime
 * depends on these interfaces only, never on src/cluster.
 */
import { Context } from "effect"
import type { InspectionEvent, Observer } from "xstate"
import type { DefinitionsStore } from "../config/definitions-store.js"
import type { ClusterOptions, StoreLimits } from "../config/options.js"
import type { ServicesFile } from "../config/services-file.js"
import type { Scope } from "../domain/service-definition.js"
import type { MonitoringSettings } from "../domain/settings.js"
import type { ReplicatedActorRef } from "../machines/replicated.js"
import type { RecordsBackend, RecordsOptions } from "../records/tool-records.js"
import type { AsyncCallEntry, AsyncResultsBackend, AsyncResultsOptions } from "../records/async-results.js"
import type { liveServiceMachine } from "./adapter.js"
import type { TokenStore } from "../config/token-vault.js"
import type { HeldCallsReplica } from "./input-required.js"
import type { ApprovalsReplica } from "./approvals.js"
import type { Tracer, TracingOptions } from "../logging/tracing.js"
import type { ProcessLedger } from "../mcp/types.js"
import type { ToolPinsBackend } from "../config/pins-file.js"
import type { CredentialStore } from "../config/credentials-file.js"
import type { PinSettings } from "../domain/pin-rules.js"

/** What an asynchronous call's start carries to the replica that runs its service. */
export interface AsyncStartInput {
  readonly tool_name: string
  readonly args?: Record<string, unknown> | undefined
  readonly service_name?: string | undefined
  readonly timeout?: number | undefined
  readonly trace?: import("../domain/trace-context.js").TraceContext | undefined
}

/** Options of `createStore`. */
export interface CreateStoreOptions {
  /** The services file (mcp.json style); created when missing. */
  readonly mcpConfigFile: string
  /** Monitoring settings; missing keys take the defaults of docs/lifecycle.md. */
  readonly monitoring?: Partial<MonitoringSettings> | undefined
  /** XState inspection observer (every actor, event and snapshot). */
  readonly inspect?: Observer<InspectionEvent> | ((event: InspectionEvent) => void) | undefined
  /** Name this store gives itself in MCP handshakes. */
  readonly clientName?: string | undefined
  /** Tool-record file size limit in MB (default 30; -1 unlimited). */
  readonly toolRecordMaxFileSize?: number | undefined
  /** Tool-record retention in days (default 7; -1 never delete). */
  readonly toolRecordRetentionDays?: number | undefined
  /** The store's caps (message size, services, waiters); missing keys take the defaults. */
  readonly limits?: Partial<StoreLimits> | undefined
  /**
   * Replica mode (docs/replicas.md): the definitions live in this cluster's Redis, shared by every
   * replica; the services file is imported when the cluster is empty. Undefined: the services file.
   */
  readonly cluster?: ClusterOptions | undefined
  /** OpenTelemetry traces exported over OTLP/HTTP (docs/design.md, "Spans"); undefined: tracing off. */
  readonly tracing?: TracingOptions | undefined
  /** Pinned tool definitions (`--pin-tools`, `--pin-new-tools`; docs/tool-pins.md); undefined: strict, new tools held. */
  readonly pinTools?: PinSettings | undefined
}

/** The store's options with every default applied (what the layers read). */
export interface StoreSettings {
  readonly options: CreateStoreOptions
  readonly settings: MonitoringSettings
  readonly limits: StoreLimits
  readonly records: RecordsOptions
  readonly asyncResults: AsyncResultsOptions
}

/** Where the store notes its local services' process groups (src/config/process-ledger.ts). */
export class Processes extends Context.Tag("mcp-store/Processes")<Processes, ProcessLedger>() {}

/** The store's options, resolved once. */
export class StoreConfig extends Context.Tag("mcp-store/StoreConfig")<StoreConfig, StoreSettings>() {}

/** The services file as opened at start (read in either mode: replica mode seeds an empty cluster from it). */
export class ServicesFileSource extends Context.Tag("mcp-store/ServicesFile")<ServicesFileSource, ServicesFile>() {}

/** The live definitions: the services file, or the cluster's Redis. */
export class Definitions extends Context.Tag("mcp-store/Definitions")<Definitions, DefinitionsStore>() {}

/** The tool-call records: a file beside the services file, or the cluster's Redis. */
export class Records extends Context.Tag("mcp-store/Records")<Records, RecordsBackend>() {}

/** Asynchronous calls' state and answers: a file beside the services file, or the cluster's Redis. */
export class AsyncResults extends Context.Tag("mcp-store/AsyncResults")<AsyncResults, AsyncResultsBackend>() {}

/** The upstreams' OAuth tokens (encrypted at rest): a file beside the services file, or the cluster's Redis. */
export class Tokens extends Context.Tag("mcp-store/Tokens")<Tokens, TokenStore>() {}

/** The pinned tool definitions: a file beside the services file, or the cluster's Redis. */
export class Pins extends Context.Tag("mcp-store/Pins")<Pins, ToolPinsBackend>() {}

/** The per-user credentials of `per_user` services (encrypted at rest): a file beside the services file, or the cluster's Redis. */
export class Credentials extends Context.Tag("mcp-store/Credentials")<Credentials, CredentialStore>() {}

/** Where the store's spans go: the OTLP exporter, or nothing (`noTracer`). */
export class Tracing extends Context.Tag("mcp-store/Tracing")<Tracing, Tracer>() {}

/** The service machine with real side effects (src/runtime/adapter.ts). */
export type LiveServiceMachine = ReturnType<typeof liveServiceMachine>

/** What the replication needs of the store's actors (implemented by `Store.replicaHost`). */
export interface ReplicaHost {
  /** The services defined here now, by `serviceField` (src/domain/replicas.ts). */
  fields(): ReadonlyArray<string>
  /** The actor of a service (a replicated one: src/machines/replicated.ts), if defined here. */
  face(field: string): ReplicatedActorRef | undefined
  /** Resolves once a service has no connection open or opening here (its process ended). */
  drain(field: string): Promise<void>
}

/**
 * How the store shares its services with other replicas: nothing for one store on its file
 * (`noReplication`), the cluster's leases, views and forwarding in replica mode.
 */
export interface ReplicationApi {
  /** True when the definitions are shared: others' changes are always applied (no `--reload` needed). */
  readonly shared: boolean
  /** The service machine the store runs for each service, given the live one. */
  serviceMachine(live: LiveServiceMachine): LiveServiceMachine
  /** Connects the replication to the store's actors, once they run. */
  attach(host: ReplicaHost): Promise<void>
  /** A service was added to the store (its actor exists). */
  added(scope: Scope, name: string): void
  /** A service was removed and its connections closed. */
  removed(scope: Scope, name: string): Promise<void>
  /** The store is stopping: no service is taken over from now on. */
  leaving(): void
  /** This replica's id (replica mode): kept with the asynchronous calls it runs. */
  readonly replicaId?: string | undefined
  /**
   * Cancels an asynchronous call another replica runs (replica mode): the call as it ended, or
   * undefined when that replica does not know it (or is gone).
   */
  readonly cancelAsyncOn?: ((replica: string, callId: string, scope: string, owner: string) => Promise<AsyncCallEntry | undefined>) | undefined
  /** Replica mode: the replica that runs a service, when it is another one (undefined: this one, or none now). */
  readonly ownerOf?: ((scope: Scope, name: string) => Promise<string | undefined>) | undefined
  /**
   * Replica mode: starts an asynchronous call on the replica that runs its service; the call's
   * entry, a refusal's message (that replica's cap on running calls), or `notStarted` when the
   * request never started anything there. Rejects when that replica may have started it (no
   * answer in time, a connection broken after the request was sent).
   */
  readonly startAsyncOn?:
    | ((
        replica: string,
        scope: Scope,
        name: string,
        start: { readonly owner: string; readonly input: AsyncStartInput }
      ) => Promise<AsyncCallEntry | { readonly refused: string } | { readonly notStarted: string }>)
    | undefined
  /** Held calls across replicas (src/runtime/input-required.ts); none for one store. */
  readonly held?: HeldCallsReplica | undefined
  /** Approvals listed and decided on any replica (src/runtime/approvals.ts); none for one store. */
  readonly approvals?: ApprovalsReplica | undefined
  /**
   * Replica mode: tells the replica that handed a task to its client (src/runtime/task-relay.ts)
   * that the task was seen ended here, so that it records the task's call; best effort.
   */
  readonly taskEndedOn?: ((replica: string, relay: string, task: Record<string, unknown>) => Promise<void>) | undefined
}

/** The replication of the store's services. */
export class Replication extends Context.Tag("mcp-store/Replication")<Replication, ReplicationApi>() {}

/** One store on its own: nothing is shared. */
export const noReplication: ReplicationApi = {
  shared: false,
  serviceMachine: (live) => live,
  attach: () => Promise.resolve(),
  added: () => undefined,
  removed: () => Promise.resolve(),
  leaving: () => undefined
}
