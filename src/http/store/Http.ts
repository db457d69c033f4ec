/** The store group's handlers: decode (done by the contract), run an operation of the four services (taken once), encode. */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import type * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import { Effect, type Layer } from "effect"
import { STORE_SCOPE } from "../../domain/service-definition.js"
import { networkCheck } from "../../runtime/network.js"
import { requestAllowedEverything } from "../authorization.js"
import { systemResources } from "../../monitoring/system.js"
import { VERSION } from "../../version.js"
import { Api } from "../Api.js"
import { App } from "../context.js"
import { operations, type OperationServices } from "../../runtime/operations.js"
import { ActorSystemService, AsyncCallsService, ConnectionsService, HeldCallsService } from "../../runtime/store-parts.js"
import { contract } from "../contract-errors.js"
import * as Shared from "../scope-handlers.js"
import { acceptToolChangesAnswer } from "../tool-pins-routes.js"
import { credentialsHandlers } from "../credentials-routes.js"

// The group's type, written out: the declaration emit (npm run build) would otherwise infer it from
// every handler, and the type-check holds the handlers to it.
export const StoreHttpLive: Layer.Layer<
  HttpApiGroup.ApiGroup<"mcp-store", "store">,
  never,
  ConnectionsService | ActorSystemService | HeldCallsService | AsyncCallsService | OperationServices | App
> = HttpApiBuilder.group(Api, "store", (handlers) =>
  Effect.gen(function* () {
    const app = yield* App
    const { store } = app
    // The operations and parts this group uses, from the store's layer graph (once, not per request).
    const ops = yield* operations
    const { commands, queries } = ops
    // The shared handlers, on those operations.
    const scoped = Shared.scopeHandlers(ops)
    const { credentialsAnswer, authorizeCredentialsAnswer, credentialsStatusAnswer } = credentialsHandlers(commands)
    const asyncCalls = yield* AsyncCallsService
    const { oauth } = yield* ActorSystemService
    const calls = { held: yield* HeldCallsService, asyncCalls }
    const connections = yield* ConnectionsService
    const scope: Shared.ScopeRef = Effect.succeed(store.forStore().effects)
    const ctx = store.forStore().effects
    return handlers
      .handle("addService", ({ payload, urlParams }) => scoped.addService(scope, payload, urlParams.wait, app.server))
      .handle("authorizeService", ({ payload }) => Shared.authorizeService(scope, oauth, payload))
      .handle("acceptToolChanges", ({ payload }) => acceptToolChangesAnswer(scope, payload))
      .handle("putCredentials", ({ path, payload }) => credentialsAnswer(scope, path.service_name, payload))
      .handle("deleteCredentials", ({ path }) => credentialsAnswer(scope, path.service_name, undefined))
      .handle("authorizeCredentials", ({ path, payload }) => authorizeCredentialsAnswer(scope, store.oauth, path.service_name, payload ?? {}))
      .handle("getCredentials", ({ path }) => credentialsStatusAnswer(scope, store.oauth, path.service_name))
      .handle("listServices", ({ urlParams }) =>
        urlParams.scope === "all"
          ? Effect.sync(() =>
              Shared.listServicesAnswer([store.forStore(), ...store.agentIds().map((id) => store.forAgent(id))].flatMap((s) => s.listServices()))
            )
          : scoped.listServices(scope)
      )
      .handle("getServiceInfo", ({ urlParams }) => scoped.getServiceInfo(scope, urlParams.name))
      .handle("listTools", ({ urlParams }) => scoped.listTools(scope, urlParams.service_name))
      .handle("searchTools", ({ urlParams }) => Shared.searchTools(scope, store.toolSearch, urlParams.q, urlParams.limit))
      .handle("callTool", ({ payload, request }) => scoped.callTool(scope, payload, request.headers, calls))
      .handle("useTool", ({ payload, request }) => scoped.callTool(scope, payload, request.headers, calls))
      .handle("getCall", ({ path, request }) => Shared.asyncCall("store", path.call_id, request.headers, asyncCalls, false))
      .handle("cancelCall", ({ path, request }) => Shared.asyncCall("store", path.call_id, request.headers, asyncCalls, true))
      .handle("checkServices", () => scoped.checkServices(scope))
      .handle("health", () => scoped.health(scope))
      .handle("getStats", () =>
        Effect.map(queries.stats(ctx), (stats) => ({
          success: true,
          message: "Store statistics",
          ...stats,
          total_agents: store.agentIds().length,
          context_type: "store" as const
        }))
      )
      .handle("showMcpConfig", ({ urlParams }) => scoped.showMcpConfig(scope, store.file.path, urlParams.reveal))
      .handle("resetConfig", ({ payload, urlParams }) =>
        Effect.suspend(() => {
          const which = payload?.scope ?? urlParams.scope ?? "store"
          // A failure here is the file system's, not the client's: a defect, answered 500 with a trace id
          // (in replica mode, Redis away: 503).
          return contract(Effect.map(commands.definitionsChange(() => store.host.resetConfig(which)), (removed) => ({
            success: true,
            message: `Removed ${removed} service(s) (${which})`,
            scope: which,
            removed
          })))
        })
      )
      .handle("resetMcpJsonFile", () =>
        contract(Effect.map(commands.definitionsChange(() => store.resetServicesFile()), (result) => ({
          success: true,
          message: `Services file emptied; backup at ${result.backup_path}`,
          ...result
        })))
      )
      .handle("waitService", ({ payload }) => scoped.waitService(scope, payload, { context: "store" }))
      .handle("deleteService", ({ path }) => scoped.deleteService(scope, path.service_name))
      .handle("deleteServiceTwoStep", ({ payload }) =>
        contract(Effect.map(commands.deleteServiceTwoStep(ctx, payload.service_name), (result) => ({
            success: result.overall_success,
            message: result.overall_success
              ? `Service '${result.service_name}' deleted`
              : `Service '${result.service_name}' was not fully deleted`,
            ...result
        })))
      )
      .handle("listResources", ({ urlParams }) => scoped.listResources(scope, urlParams.service_name))
      .handle("listResourceTemplates", ({ urlParams }) => scoped.listResourceTemplates(scope, urlParams.service_name))
      .handle("listPrompts", ({ urlParams }) => scoped.listPrompts(scope, urlParams.service_name))
      .handle("readResource", ({ payload }) => scoped.readResource(scope, payload.uri))
      .handle("getPrompt", ({ payload }) => scoped.getPrompt(scope, payload.name, payload.arguments))
      .handle("toolRecords", ({ urlParams }) => scoped.toolRecords(scope, urlParams, urlParams.scope === "all"))
      .handle("networkCheck", ({ payload }) =>
        contract(
          Effect.flatMap(requestAllowedEverything, (admin) =>
            networkCheck(payload.endpoints, {
              // Only a request allowed everything may probe a URL that no service of the scope has.
              registered: admin ? undefined : new Set(Object.values(store.serviceActors(STORE_SCOPE)).map((a) => String(a.getSnapshot().context.definition.url ?? ""))),
              policy: connections.options.upstream
            })
          ).pipe(Effect.map((results) => {
            const reachable = results.filter((r) => r.reachable).length
            return { success: true, message: `${reachable} of ${results.length} endpoint(s) reachable`, results }
          }))
        )
      )
      .handle("systemResources", () =>
        Effect.map(Effect.promise(() => systemResources(store.file.path, store.startedAt)), (resources) => ({
          success: true,
          message: "System resources",
          ...resources
        }))
      )
      .handle("serviceStatus", ({ path }) =>
        contract(
          Effect.map(queries.serviceStatus(ctx, path.service_name), (status) => ({
            success: true,
            message: `Service '${status.name}' is ${status.status}`,
            ...status
          }))
        )
      )
      .handle("restartService", ({ payload }) =>
        contract(
          Effect.map(commands.restartService(ctx, payload.service_name), (result) => ({
            success: true,
            message: `Service '${result.service_name}' restarting`,
            ...result
          }))
        )
      )
      .handle("updateService", ({ path, payload }) =>
        contract(
          Effect.gen(function* () {
            const local = yield* Shared.localPolicy(app.server)
            const result = yield* commands.updateService(ctx, path.service_name, payload, { local })
            const name = result.service.name
            return { success: true, message: result.changed ? `Service '${name}' updated; reconnecting` : `Service '${name}' unchanged`, ...result }
          })
        )
      )
      .handle("disconnectService", ({ payload }) =>
        contract(
          Effect.map(commands.disconnectService(ctx, payload.service_name, payload.reason), (result) => ({
            success: true,
            message: `Service '${result.service_name}' is ${result.status}`,
            ...result
          }))
        )
      )
      .handle("listAllAgents", () =>
        Effect.sync(() => {
          const agents = store.listAgents()
          return { success: true, message: `${agents.length} agent(s)`, agents, total_agents: agents.length }
        })
      )
      .handle("showConfig", () =>
        Effect.sync(() => ({
          success: true,
          message: "Effective settings",
          config: {
            mcp_config_file: app.storeOptions.mcpConfigFile,
            debug: app.storeOptions.debug,
            tool_record_max_file_size: app.storeOptions.toolRecordMaxFileSize,
            tool_record_retention_days: app.storeOptions.toolRecordRetentionDays,
            // Pinned tool definitions (docs/tool-pins.md): the default of services without their own "pin".
            pin_tools: store.pins?.settings.mode ?? "off",
            pin_new_tools: store.pins?.settings.newTools ?? "hold",
            monitoring: store.settings,
            server: {
              host: app.server.host,
              port: app.port(),
              reload: app.server.reload,
              log_level: app.server.logLevel,
              auto_open_browser: app.server.autoOpenBrowser,
              show_startup_info: app.server.showStartupInfo,
              api_key_set: app.server.apiKey !== undefined,
              local_services: app.server.localServices,
              allowed_hosts: app.server.allowedHosts,
              allowed_origins: app.server.allowedOrigins,
              allow_remote_local_services: app.server.allowRemoteLocalServices,
              max_event_streams: app.server.maxEventStreams,
              max_mcp_sessions: app.server.maxMcpSessions,
              mcp_session_idle_seconds: app.server.mcpSessionIdleSeconds,
              max_body_bytes: app.server.maxBodyBytes,
              max_connections: app.server.maxConnections
            },
            limits: {
              max_message_bytes: store.limits.maxMessageBytes,
              max_services: store.limits.maxServices,
              max_services_per_request: store.limits.maxServicesPerRequest,
              max_waiters: store.limits.maxWaiters,
              max_call_seconds: store.limits.maxCallSeconds,
              max_held_calls: store.limits.maxHeldCalls,
              max_async_calls: store.limits.maxAsyncCalls,
              max_async_results: store.limits.maxAsyncResults,
              async_result_retention_seconds: store.limits.asyncResultRetentionSeconds,
              async_results_max_bytes: store.limits.asyncResultsMaxBytes
            },
            version: VERSION
          }
        }))
      )
      .handle("refreshTools", ({ payload }) =>
        contract(
          Effect.map(commands.refreshTools(ctx, payload?.service_name), (results) => ({
            success: true,
            message: `${results.length} service(s) refreshed, ${results.filter((r) => r.changed).length} changed`,
            results
          }))
        )
      )
  })
)
