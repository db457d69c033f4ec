/**
 * The library entry point: create a store in-process, use the same operations the HTTP layer
 * uses (as Promises through a scope's `ScopeApi`, or as Effects through the operation services
 * of the layer graph), and reach the store, agent and service actors directly (send events, read
 * snapshots, subscribe). Or start the whole HTTP server.
 */
export { Store, type CreateStoreOptions } from "./runtime/store.js"
export { createStore, storeLayer } from "./composition/layer-graph.js"
export { ScopeApi, parseDefinitions, toolErrorMessage } from "./runtime/scope.js"
// The store's layer graph as services (`storeLayer(options)` provides them): the store and its
// operations as Effects with typed failures, each taking a scope (`store.forStore().effects`).
export { StoreService } from "./runtime/store.js"
export { Calls, Catalog, Commands, Queries, type CallOperations, type CatalogOperations, type CommandOperations, type QueryOperations } from "./runtime/operations.js"
export { ScopeContext, type StoreHost } from "./runtime/host.js"
export type {
  AddServiceResult,
  CallToolInput,
  CallToolOutput,
  WaitServiceInput,
  WaitServiceOutput,
  TwoStepDeleteResult
} from "./runtime/scope.js"
export { ToolRecords, type ToolRecord, type Outcome } from "./records/tool-records.js"
export type { ServiceView, ToolView } from "./runtime/service-views.js"
export * from "./domain/errors.js"
export { awaitSnapshotPromise as awaitSnapshot, awaitSnapshot as awaitSnapshotEffect, type WaitResult, type WaitEnd } from "./runtime/bridge.js"
export { serviceMachine, statusOf, backoffMs } from "./machines/service.js"
export type { ServiceActorRef, ServiceSnapshot, ServiceEvent, ServiceInput, Transition } from "./machines/service.js"
export { agentMachine, type AgentActorRef } from "./machines/agent.js"
export { storeMachine, type StoreActorRef, type StoreEvent } from "./machines/root.js"
export { STORE_SYSTEM_ID, agentSystemId, serviceSystemId } from "./machines/supervisor.js"
export { type Scope, STORE_SCOPE, agentScope } from "./domain/service-definition.js"
export {
  AddServiceBody,
  AgentId,
  ServiceDefinition,
  ServiceName,
  ServiceRef,
  STATUSES,
  Status,
  ToolName,
  UpdateServiceBody
} from "./domain/schemas.js"
export { defaultMonitoring, type MonitoringSettings } from "./domain/settings.js"
export { startServer, type RunningServer, type StartServerOptions } from "./http/server.js"
export { resolveOptions, type Options, type ServerOptions, type StoreOptions } from "./config/options.js"
