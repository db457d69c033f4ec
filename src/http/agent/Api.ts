/** The agent group's contract: endpoints of `/for_agent/{agent_id}` (shared/API.md). */
import { HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { scopeEndpoints } from "../schemas.js"

/** The agent id path parameter; its pattern is checked by the store (400 with the field named). */
export const AgentPath = Schema.Struct({ agent_id: Schema.String })

const shared = scopeEndpoints("/for_agent/:agent_id")

export class AgentApi extends HttpApiGroup.make("agent")
  .add(shared.addService.setPath(AgentPath).annotate(OpenApi.Summary, "Register services in an agent's space"))
  .add(shared.callTool.setPath(AgentPath).annotate(OpenApi.Summary, "Call a tool of one of the agent's services"))
  .add(shared.useTool.setPath(AgentPath).annotate(OpenApi.Summary, "Call a tool (kept for backward compatibility)"))
  .add(shared.waitService.setPath(AgentPath).annotate(OpenApi.Summary, "Wait until an agent's service reaches a status")) {}
