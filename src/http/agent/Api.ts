/** The agent group's contract: endpoints of `/for_agent/{agent_id}` (docs/api.md). */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { AgentId, ServiceRef } from "../../domain/schemas.js"
import { CallId, ListServicesResponse, RecordsQuery, ResetResponse, scopeEndpoints } from "../payloads.js"
import { acceptToolChangesEndpoint } from "../tool-pins-routes.js"
import { AgentCredentialsPath, credentialsEndpoints } from "../credentials-routes.js"

/** The agent id path parameter, decoded as the domain's `AgentId` (a malformed one is 400 naming `agent_id`). */
export const AgentPath = Schema.Struct({ agent_id: AgentId })
const AgentServicePath = Schema.Struct({ agent_id: AgentId, service_name: ServiceRef })
const AgentCallPath = Schema.Struct({ agent_id: AgentId, call_id: CallId })

const shared = scopeEndpoints("/for_agent/:agent_id")

export class AgentApi extends HttpApiGroup.make("agent")
  .add(shared.addService.setPath(AgentPath).annotate(OpenApi.Summary, "Register services in an agent's space"))
  .add(
    HttpApiEndpoint.get("listServices", "/for_agent/:agent_id/list_services")
      .setPath(AgentPath)
      .addSuccess(ListServicesResponse)
      .annotate(OpenApi.Summary, "The agent's services")
  )
  .add(shared.getServiceInfo.setPath(AgentPath).annotate(OpenApi.Summary, "One of the agent's services in detail"))
  .add(shared.listTools.setPath(AgentPath).annotate(OpenApi.Summary, "The agent's tools"))
  .add(shared.searchTools.setPath(AgentPath).annotate(OpenApi.Summary, "Search the agent's tools (README, Large catalogs)"))
  .add(shared.callTool.setPath(AgentPath).annotate(OpenApi.Summary, "Call a tool of one of the agent's services"))
  .add(shared.listResources.setPath(AgentPath).annotate(OpenApi.Summary, "The agent's resources"))
  .add(shared.listResourceTemplates.setPath(AgentPath).annotate(OpenApi.Summary, "The agent's resource templates"))
  .add(shared.readResource.setPath(AgentPath).annotate(OpenApi.Summary, "Read a resource of one of the agent's services"))
  .add(shared.listPrompts.setPath(AgentPath).annotate(OpenApi.Summary, "The agent's prompts"))
  .add(shared.getPrompt.setPath(AgentPath).annotate(OpenApi.Summary, "Get a prompt of one of the agent's services"))
  .add(shared.useTool.setPath(AgentPath).annotate(OpenApi.Summary, "Call a tool (kept for backward compatibility)"))
  .add(shared.getCall.setPath(AgentCallPath).annotate(OpenApi.Summary, "An asynchronous call of the agent (call_tool \"async\": true): status, progress, answer"))
  .add(shared.cancelCall.setPath(AgentCallPath).annotate(OpenApi.Summary, "Cancel an asynchronous call of the agent"))
  .add(shared.waitService.setPath(AgentPath).annotate(OpenApi.Summary, "Wait until an agent's service reaches a status"))
  .add(acceptToolChangesEndpoint("/for_agent/:agent_id").setPath(AgentPath).annotate(OpenApi.Summary, "Accept the changed definitions of an agent's service's held tools (pinned tools)"))
  .add(credentialsEndpoints("/for_agent/:agent_id").put.setPath(AgentCredentialsPath).annotate(OpenApi.Summary, "Give your own credential for an agent's per_user service (write-only)"))
  .add(credentialsEndpoints("/for_agent/:agent_id").del.setPath(AgentCredentialsPath).annotate(OpenApi.Summary, "Delete your own credential for an agent's per_user service"))
  .add(credentialsEndpoints("/for_agent/:agent_id").authorize.setPath(AgentCredentialsPath).annotate(OpenApi.Summary, "Authorize an agent's per_user OAuth service's upstream for yourself (your own token)"))
  .add(credentialsEndpoints("/for_agent/:agent_id").get.setPath(AgentCredentialsPath).annotate(OpenApi.Summary, "What you have given and authorized for an agent's per_user service (names only)"))
  .add(shared.authorizeService.setPath(AgentPath).annotate(OpenApi.Summary, "Start (or finish with a pasted code) the OAuth authorization of an agent's upstream"))
  .add(shared.checkServices.setPath(AgentPath).annotate(OpenApi.Summary, "Health-check every service of the agent now"))
  .add(shared.deleteService.setPath(AgentServicePath).annotate(OpenApi.Summary, "Delete one of the agent's services"))
  .add(shared.showMcpConfig.setPath(AgentPath).annotate(OpenApi.Summary, "The agent's part of the services file"))
  .add(
    HttpApiEndpoint.post("resetConfig", "/for_agent/:agent_id/reset_config")
      .setPath(AgentPath)
      .addSuccess(ResetResponse)
      .annotate(OpenApi.Summary, "Stop and remove every service of the agent")
  )
  .add(shared.health.setPath(AgentPath).annotate(OpenApi.Summary, "The agent's health"))
  .add(shared.getStats.setPath(AgentPath).annotate(OpenApi.Summary, "Statistics of the agent"))
  .add(shared.toolRecords.setPath(AgentPath).setUrlParams(RecordsQuery).annotate(OpenApi.Summary, "The agent's tool-call records")) {}
