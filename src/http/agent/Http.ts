/** The agent group's handlers: the agent id is checked by the store (400 when malformed). */
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { Api } from "../Api.js"
import { App } from "../context.js"
import { addService, callTool, waitService } from "../scope-handlers.js"

export const AgentHttpLive = HttpApiBuilder.group(Api, "agent", (handlers) =>
  Effect.gen(function* () {
    const { store } = yield* App
    const scope = (agentId: string) => () => store.forAgent(agentId)
    return handlers
      .handle("addService", ({ path, payload, urlParams }) => addService(scope(path.agent_id), payload, urlParams.wait))
      .handle("callTool", ({ path, payload }) => callTool(scope(path.agent_id), payload))
      .handle("useTool", ({ path, payload }) => callTool(scope(path.agent_id), payload))
      .handle("waitService", ({ path, payload }) =>
        waitService(scope(path.agent_id), payload, { context: "agent", agent_id: path.agent_id })
      )
  })
)
