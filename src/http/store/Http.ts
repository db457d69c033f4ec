/** The store group's handlers: decode (done by the contract), call the store, encode. */
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { networkCheck } from "../../runtime/network.js"
import { Api } from "../Api.js"
import { App } from "../context.js"
import { run } from "../errors.js"
import { addService, callTool, waitService } from "../scope-handlers.js"

export const StoreHttpLive = HttpApiBuilder.group(Api, "store", (handlers) =>
  Effect.gen(function* () {
    const { store } = yield* App
    const scope = () => store.forStore()
    return handlers
      .handle("addService", ({ payload, urlParams }) => addService(scope, payload, urlParams.wait))
      .handle("listServices", ({ urlParams }) =>
        Effect.sync(() => {
          const services = [...scope().listServices()]
          const tools = [...scope().listTools()]
          if (urlParams.scope === "all") {
            for (const id of store.agentIds()) {
              const agent = store.forAgent(id)
              services.push(...agent.listServices())
              tools.push(...agent.listTools())
            }
          }
          return {
            success: true,
            message: `${services.length} service(s)`,
            services,
            total_services: services.length,
            total_tools: tools.length
          }
        })
      )
      .handle("callTool", ({ payload }) => callTool(scope, payload))
      .handle("useTool", ({ payload }) => callTool(scope, payload))
      .handle("waitService", ({ payload }) => waitService(scope, payload, { context: "store" }))
      .handle("deleteServiceTwoStep", ({ payload }) =>
        run(async () => {
          const result = await scope().deleteServiceTwoStep(payload.service_name)
          return {
            success: result.overall_success,
            message: result.overall_success
              ? `Service '${result.service_name}' deleted`
              : `Service '${result.service_name}' was not fully deleted`,
            ...result
          }
        })
      )
      .handle("networkCheck", ({ payload }) =>
        run(async (signal) => {
          const results = await networkCheck(payload.endpoints, signal)
          const reachable = results.filter((r) => r.reachable).length
          return { success: true, message: `${reachable} of ${results.length} endpoint(s) reachable`, results }
        })
      )
  })
)
