/** The agent group's handlers: the agent id is checked first (400 when malformed); the operations are the four services, taken once. */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import type * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import { Effect, type Layer } from "effect"
import { operations, type OperationServices } from "../../runtime/operations.js"
import { ActorSystemService, AsyncCallsService, HeldCallsService } from "../../runtime/store-parts.js"
import { Api } from "../Api.js"
import { App } from "../context.js"
import { currentPrincipal, gateOf } from "../access.js"
import { contract } from "../contract-errors.js"
import * as Shared from "../scope-handlers.js"
import { acceptToolChangesAnswer } from "../tool-pins-routes.js"
import { credentialsHandlers } from "../credentials-routes.js"

// The group's type, written out: the declaration emit (npm run build) would otherwise infer it from
// every handler, and the type-check holds the handlers to it.
export const AgentHttpLive: Layer.Layer<
  HttpApiGroup.ApiGroup<"mcp-store", "agent">,
  never,
  ActorSystemService | HeldCallsService | AsyncCallsService | OperationServices | App
> = HttpApiBuilder.group(Api, "agent", (handlers) =>
  Effect.gen(function* () {
    const { store, server } = yield* App
    // The operations and parts this group uses, from the store's layer graph (once, not per request).
    const ops = yield* operations
    const { commands, queries } = ops
    // The shared handlers, on those operations.
    const scoped = Shared.scopeHandlers(ops)
    const { credentialsAnswer, authorizeCredentialsAnswer, credentialsStatusAnswer } = credentialsHandlers(commands)
    const asyncCalls = yield* AsyncCallsService
    const { oauth } = yield* ActorSystemService
    const calls = { held: yield* HeldCallsService, asyncCalls }
    // The agent's scope as the caller sees it: an agent key's tool allow-list applies (src/http/access.ts).
    const scope = (agentId: string) => Effect.zipWith(store.agentContext(agentId), currentPrincipal, (ctx, principal) => ctx.gated(gateOf(principal)))
    return handlers
      .handle("addService", ({ path, payload, urlParams }) => scoped.addService(scope(path.agent_id), payload, urlParams.wait, server))
      .handle("listServices", ({ path }) => scoped.listServices(scope(path.agent_id)))
      .handle("authorizeService", ({ path, payload }) => Shared.authorizeService(scope(path.agent_id), oauth, payload))
      .handle("acceptToolChanges", ({ path, payload }) => acceptToolChangesAnswer(scope(path.agent_id), payload))
      .handle("putCredentials", ({ path, payload }) => credentialsAnswer(scope(path.agent_id), path.service_name, payload))
      .handle("deleteCredentials", ({ path }) => credentialsAnswer(scope(path.agent_id), path.service_name, undefined))
      .handle("authorizeCredentials", ({ path, payload }) => authorizeCredentialsAnswer(scope(path.agent_id), store.oauth, path.service_name, payload ?? {}))
      .handle("getCredentials", ({ path }) => credentialsStatusAnswer(scope(path.agent_id), store.oauth, path.service_name))
      .handle("getServiceInfo", ({ path, urlParams }) => scoped.getServiceInfo(scope(path.agent_id), urlParams.name))
      .handle("listTools", ({ path, urlParams }) => scoped.listTools(scope(path.agent_id), urlParams.service_name))
      .handle("searchTools", ({ path, urlParams }) => Shared.searchTools(scope(path.agent_id), store.toolSearch, urlParams.q, urlParams.limit))
      .handle("callTool", ({ path, payload, request }) => scoped.callTool(scope(path.agent_id), payload, request.headers, calls))
      .handle("useTool", ({ path, payload, request }) => scoped.callTool(scope(path.agent_id), payload, request.headers, calls))
      .handle("getCall", ({ path, request }) => Shared.asyncCall(path.agent_id, path.call_id, request.headers, asyncCalls, false))
      .handle("cancelCall", ({ path, request }) => Shared.asyncCall(path.agent_id, path.call_id, request.headers, asyncCalls, true))
      .handle("waitService", ({ path, payload }) =>
        scoped.waitService(scope(path.agent_id), payload, { context: "agent", agent_id: path.agent_id })
      )
      .handle("checkServices", ({ path }) => scoped.checkServices(scope(path.agent_id)))
      .handle("deleteService", ({ path }) => scoped.deleteService(scope(path.agent_id), path.service_name))
      .handle("showMcpConfig", ({ path, urlParams }) => scoped.showMcpConfig(scope(path.agent_id), store.file.path, urlParams.reveal))
      .handle("resetConfig", ({ path }) =>
        contract(
          Effect.map(Effect.flatMap(scope(path.agent_id), commands.resetAgent), (removed) => ({
            success: true,
            message: `Removed ${removed} service(s) of agent '${path.agent_id}'`,
            scope: path.agent_id,
            removed
          }))
        )
      )
      .handle("health", ({ path }) => scoped.health(scope(path.agent_id), path.agent_id))
      .handle("getStats", ({ path }) =>
        contract(
          Effect.map(Effect.flatMap(scope(path.agent_id), queries.stats), (stats) => ({
            success: true,
            message: `Statistics of agent '${path.agent_id}'`,
            ...stats,
            context_type: "agent" as const,
            agent_id: path.agent_id
          }))
        )
      )
      .handle("listResources", ({ path, urlParams }) => scoped.listResources(scope(path.agent_id), urlParams.service_name))
      .handle("listResourceTemplates", ({ path, urlParams }) => scoped.listResourceTemplates(scope(path.agent_id), urlParams.service_name))
      .handle("listPrompts", ({ path, urlParams }) => scoped.listPrompts(scope(path.agent_id), urlParams.service_name))
      .handle("readResource", ({ path, payload }) => scoped.readResource(scope(path.agent_id), payload.uri))
      .handle("getPrompt", ({ path, payload }) => scoped.getPrompt(scope(path.agent_id), payload.name, payload.arguments))
      .handle("toolRecords", ({ path, urlParams }) => scoped.toolRecords(scope(path.agent_id), urlParams, false))
  })
)
