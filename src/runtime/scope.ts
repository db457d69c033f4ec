/**
 * The operations of one scope (the store, or one agent): what the HTTP handlers of the store and
 * agent groups call, and what a library user calls through `store.forStore()` /
 * `store.forAgent(id)`. They live in three rooms, by what they do: src/runtime/calls.ts (the call
 * path), src/runtime/commands.ts (changes), src/runtime/queries.ts (reads and waits); `ScopeApi`
 * binds them to one scope.
 */
import { Effect } from "effect"
import type { Scope } from "../domain/service-definition.js"
import type { ToolGate } from "../domain/tool-filter.js"
import * as calls from "./calls.js"
import * as catalog from "./catalog.js"
import * as commands from "./commands.js"
import { ScopeContext, type StoreHost } from "./host.js"
import * as queries from "./queries.js"
import { runToPromise, runToValue } from "./run.js"

export type { CallToolInput, CallToolOutput } from "./calls.js"
export { toolErrorMessage } from "./calls.js"
export type { AddServiceInput, AddServiceResult, LocalServicesPolicy, TwoStepDeleteResult, UpdateServiceInput } from "./commands.js"
export { parseDefinitions } from "./commands.js"
export type { WaitServiceInput, WaitServiceOutput } from "./queries.js"

/**
 * The operations of one scope (the store, or one agent), as Promises (reads as values): the
 * library's API over the Effect operations of the three rooms. `effects` gives the Effects
 * themselves (what the HTTP handlers run). Failures are the store's errors, as documented.
 */
export class ScopeApi {
  /** The scope seen through the store: the rooms' operations take it first. */
  readonly effects: ScopeContext

  constructor(
    host: StoreHost,
    /** The scope these operations act on. */
    readonly scope: Scope,
    /** A caller's tool allow-list (src/domain/tool-filter.ts): the tools listed and callable are those it lets through. */
    gate?: ToolGate | undefined
  ) {
    this.effects = new ScopeContext(host, scope, gate)
  }

  /** These operations for a caller with a tool allow-list (this API when there is none). */
  gated(gate: ToolGate | undefined): ScopeApi {
    return gate === undefined ? this : new ScopeApi(this.effects.host, this.scope, gate)
  }

  actors() {
    return this.effects.actors()
  }

  findService(nameOrClientId: string) {
    return this.effects.findService(nameOrClientId)
  }

  requireService(nameOrClientId: string) {
    return this.effects.requireService(nameOrClientId)
  }

  // The call path.

  /** Calls a tool; `signal` abandons the call (the upstream request is cancelled). */
  callTool(input: calls.CallToolInput, signal?: AbortSignal) {
    return runToPromise(calls.callTool(this.effects, input), signal)
  }

  // Commands.

  /** Registers services; `body` is add_service's body as JSON (decoded here: a `ValidationError` names each bad field). */
  addService(body: unknown, options?: Parameters<typeof commands.addService>[2], signal?: AbortSignal) {
    return runToPromise(
      Effect.flatMap(commands.decodeAddServiceBody(body), (decoded) => commands.addService(this.effects, decoded, options)),
      signal
    )
  }

  /** Replaces a service's definition; `body` is update_service's body as JSON (decoded here). */
  updateService(nameOrClientId: string, body: unknown, options?: Parameters<typeof commands.updateService>[3]) {
    return runToPromise(
      Effect.flatMap(commands.decodeUpdateServiceBody(body), (decoded) => commands.updateService(this.effects, nameOrClientId, decoded, options))
    )
  }

  deleteService(nameOrClientId: string) {
    return runToPromise(commands.deleteService(this.effects, nameOrClientId))
  }

  deleteServiceTwoStep(nameOrClientId: string) {
    return runToPromise(commands.deleteServiceTwoStep(this.effects, nameOrClientId))
  }

  restartService(nameOrClientId: string) {
    return runToPromise(commands.restartService(this.effects, nameOrClientId))
  }

  disconnectService(nameOrClientId: string, reason?: string, signal?: AbortSignal) {
    return runToPromise(commands.disconnectService(this.effects, nameOrClientId, reason), signal)
  }

  refreshTools(serviceName?: string, signal?: AbortSignal) {
    return runToPromise(commands.refreshTools(this.effects, serviceName), signal)
  }

  checkServices(signal?: AbortSignal) {
    return runToPromise(commands.checkServices(this.effects), signal)
  }

  resetAgent() {
    return runToPromise(commands.resetAgent(this.effects))
  }

  // Queries.

  listServices() {
    return runToValue(queries.listServices(this.effects))
  }

  listTools(serviceName?: string) {
    return runToValue(queries.listTools(this.effects, serviceName))
  }

  getServiceInfo(nameOrClientId: string) {
    return runToValue(queries.getServiceInfo(this.effects, nameOrClientId))
  }

  serviceStatus(nameOrClientId: string) {
    return runToValue(queries.serviceStatus(this.effects, nameOrClientId))
  }

  statusCounts() {
    return runToValue(queries.statusCounts(this.effects))
  }

  health() {
    return runToValue(queries.health(this.effects))
  }

  stats() {
    return runToValue(queries.stats(this.effects))
  }

  /** The scope's part of the services file, secrets masked unless `reveal` (src/domain/secrets.ts). */
  mcpConfig(reveal = false) {
    return runToValue(queries.mcpConfig(this.effects, reveal))
  }

  waitService(input: queries.WaitServiceInput, signal?: AbortSignal) {
    return runToPromise(queries.waitService(this.effects, input), signal)
  }

  toolRecords(query: Parameters<typeof queries.toolRecords>[1], all = false) {
    return runToPromise(queries.toolRecords(this.effects, query, all))
  }

  // Resources and prompts (src/runtime/catalog.ts).

  /** The scope's resources (URIs prefixed where two services collide), or one service's. */
  listResources(serviceName?: string) {
    return catalog.resourceViews(this.effects, serviceName)
  }

  listResourceTemplates(serviceName?: string) {
    return catalog.resourceTemplateViews(this.effects, serviceName)
  }

  /** The scope's prompts, named `<service>__<prompt>`, or one service's. */
  listPrompts(serviceName?: string) {
    return catalog.promptViews(this.effects, serviceName)
  }

  /** Reads a resource by its URI (as listed, prefixed, or matching a template); `ResourceNotFound` when no service of the scope has it. */
  readResource(uri: string, signal?: AbortSignal) {
    return runToPromise(catalog.readResource(this.effects, uri), signal)
  }

  getPrompt(name: string, args?: Readonly<Record<string, string>>, signal?: AbortSignal) {
    return runToPromise(catalog.getPrompt(this.effects, name, args), signal)
  }

  complete(params: Parameters<typeof catalog.complete>[1], signal?: AbortSignal) {
    return runToPromise(catalog.complete(this.effects, params), signal)
  }
}
