/**
 * The operations of a scope as services of the layer graph, one per room: `Calls` (the call path,
 * src/runtime/calls.ts), `Catalog` (resources, prompts, completion), `Commands` (changes) and
 * `Queries` (reads and waits). Each operation takes the scope it acts on (a `ScopeContext`, which
 * reaches the store's parts through `StoreHost`). Every face (the REST handlers, the direct call
 * route, the MCP endpoint's two eras, the cluster's internal route) takes these services from the
 * context once, when it is built, so a request costs no more than a direct call; src/http may not
 * import the four rooms themselves (an import rule of .dependency-cruiser.cjs), only their types.
 */
import { Context, Effect, Layer } from "effect"
import * as calls from "./calls.js"
import * as catalog from "./catalog.js"
import * as commands from "./commands.js"
import * as queries from "./queries.js"
import { StoreService } from "./store.js"

/** The call path: a decoded call of a scope to its outcome. */
const callOperations = {
  resolveTarget: calls.resolveTarget,
  runCall: calls.runCall,
  heldCallRun: calls.heldCallRun,
  callOutcome: calls.callOutcome,
  callToolOutput: calls.callToolOutput,
  callTool: calls.callTool,
  relayTaskRequest: calls.relayTaskRequest
}

/** Resources, prompts and completion of a scope's services. */
const catalogOperations = {
  resourceViews: catalog.resourceViews,
  resourceTemplateViews: catalog.resourceTemplateViews,
  promptViews: catalog.promptViews,
  scopeCapabilities: catalog.scopeCapabilities,
  catalogFingerprint: catalog.catalogFingerprint,
  resolveResource: catalog.resolveResource,
  isPerUser: catalog.isPerUser,
  subscribeAsPrincipal: catalog.subscribeAsPrincipal,
  resolvePrompt: catalog.resolvePrompt,
  readResource: catalog.readResource,
  heldCatalogRun: catalog.heldCatalogRun,
  getPrompt: catalog.getPrompt,
  complete: catalog.complete
}

/** The changes of a scope: each written to the definitions before it resolves, one at a time. */
const commandOperations = {
  decodeAddServiceBody: commands.decodeAddServiceBody,
  decodeUpdateServiceBody: commands.decodeUpdateServiceBody,
  definitionsChange: commands.definitionsChange,
  addService: commands.addService,
  deleteService: commands.deleteService,
  deleteServiceTwoStep: commands.deleteServiceTwoStep,
  checkServices: commands.checkServices,
  restartService: commands.restartService,
  updateService: commands.updateService,
  disconnectService: commands.disconnectService,
  refreshTools: commands.refreshTools,
  resetAgent: commands.resetAgent
}

/** The reads and waits of a scope. */
const queryOperations = {
  listServices: queries.listServices,
  listTools: queries.listTools,
  getServiceInfo: queries.getServiceInfo,
  statusCounts: queries.statusCounts,
  health: queries.health,
  stats: queries.stats,
  mcpConfig: queries.mcpConfig,
  serviceStatus: queries.serviceStatus,
  waitService: queries.waitService,
  toolRecords: queries.toolRecords
}

export type CallOperations = typeof callOperations
export type CatalogOperations = typeof catalogOperations
export type CommandOperations = typeof commandOperations
export type QueryOperations = typeof queryOperations

/** The call path of the store's scopes. */
export class Calls extends Context.Tag("mcp-store/Calls")<Calls, CallOperations>() {}

/** Resources, prompts and completion of the store's scopes. */
export class Catalog extends Context.Tag("mcp-store/Catalog")<Catalog, CatalogOperations>() {}

/** The changes of the store's scopes. */
export class Commands extends Context.Tag("mcp-store/Commands")<Commands, CommandOperations>() {}

/** The reads and waits of the store's scopes. */
export class Queries extends Context.Tag("mcp-store/Queries")<Queries, QueryOperations>() {}

/** Every room of the operations. */
export type OperationServices = Calls | Catalog | Commands | Queries

/** The four rooms' operations, as a face holds them once it is built. */
export interface Operations {
  readonly calls: CallOperations
  readonly catalog: CatalogOperations
  readonly commands: CommandOperations
  readonly queries: QueryOperations
}

/** The four rooms, taken from the context at once (by a face, when it is built). */
export const operations: Effect.Effect<Operations, never, OperationServices> = Effect.all({ calls: Calls, catalog: Catalog, commands: Commands, queries: Queries })

/**
 * The operations, on the running store: built after it (they act on its scopes), released before
 * it (they hold nothing of their own).
 */
export const OperationsLive: Layer.Layer<OperationServices, never, StoreService> = Layer.effectContext(
  // One layer for the four (a layer each, merged, cost Effect more than the rest of this graph's parts).
  Effect.as(
    StoreService,
    Context.make(Calls, callOperations).pipe(Context.add(Catalog, catalogOperations), Context.add(Commands, commandOperations), Context.add(Queries, queryOperations))
  )
)
