/**
 * What each role may reach (README, Security), in one place: the authorization middleware
 * (src/http/authorization.ts) and the direct call route (src/http/call-route.ts) ask `routeAccess`
 * before anything else runs, and the monitoring handlers and /events narrow their figures with
 * `narrowFor`. The request's principal is the `Principal` service, set by the middleware.
 *
 * - admin: everything.
 * - agent (bound to agent A): `/for_agent/A/*` (A's MCP endpoint included), the open routes, the
 *   monitoring routes whose figures can be narrowed to A (narrowed, whatever the query asks), and
 *   /events (A's events only). Store-wide routes answer 403 FORBIDDEN.
 * - reader: GET routes, but none that shows a definition's secrets or changes anything
 *   (show_mcpconfig, show_config, /inspect/*, the MCP endpoints, /sse included).
 */
import { Context, Effect, Option } from "effect"
import type { Principal } from "../config/api-keys.js"
import { toolGate, type ToolGate } from "../domain/tool-filter.js"

export type { Principal } from "../config/api-keys.js"

/** The principal of the request being handled (admin when the server needs no key). */
export class PrincipalTag extends Context.Tag("mcp-store/Principal")<PrincipalTag, Principal>() {}

export const ADMIN: Principal = { role: "admin" }

/**
 * The principal, for the routes mounted beside the contract (src/http/extras.ts): the middleware
 * provides it around the whole router, which their handlers' types do not show. Fails closed (a
 * defect, 500) if it is missing.
 */
export const currentPrincipal: Effect.Effect<Principal> = Effect.flatMap(Effect.serviceOption(PrincipalTag), (p) =>
  Option.isSome(p) ? Effect.succeed(p.value) : Effect.dieMessage("no principal: the authorization middleware did not run")
)

/**
 * The tool allow-list of a principal: an agent key's `tools` (globs over callable names, compiled
 * once per list); none for admin and reader keys, nor for an agent key without a list (unless the
 * store runs with `--deny-by-default`: its keys then carry an empty list, src/config/api-keys.ts).
 */
export const gateOf = (principal: Principal): ToolGate | undefined =>
  principal.role === "agent" && principal.tools !== undefined ? toolGate(principal.tools) : undefined

/** Who a principal is, in words an approver reads (`agent 'a1' key 'ci'`, `admin key 'ops'`); never the key. */
export const callerWords = (principal: Principal): string => {
  const key = principal.label === undefined ? "" : ` key '${principal.label}'`
  switch (principal.role) {
    case "admin":
      return key === "" ? "the admin (no API key)" : `admin${key}`
    case "agent":
      return `agent '${principal.agentId}'${key}`
    case "reader":
      return `reader${key}`
  }
}

/** Monitoring routes an agent key reaches, narrowed to its agent. */
const NARROWED_MONITORING = new Set([
  "/monitoring/agents_summary",
  "/monitoring/services_status_distribution",
  "/monitoring/tools_usage_stats",
  "/monitoring/services_response_time",
  "/monitoring/error_rate_stats",
  "/monitoring/historical_stats",
  "/monitoring/service_health_history",
  "/monitoring/tool_call_history",
  "/monitoring/alerts"
])

/** GET routes a reader does not reach: they show definitions (secrets) or hold a session. */
const READER_REFUSED = [/^\/for_store\/show_mcpconfig$/, /^\/for_store\/show_config$/, /^\/for_agent\/[^/]+\/show_mcpconfig$/, /^\/inspect\//, /^\/(mcp|sse|messages)$/, /^\/for_agent\/[^/]+\/(mcp|sse|messages)$/]

/** The agent id of a `/for_agent/<id>/...` path, percent-decoded as the router does (undefined when malformed). */
const agentOfPath = (path: string): string | undefined => {
  const m = /^\/for_agent\/([^/]*)\//.exec(path)
  if (m === null) return undefined
  try {
    return decodeURIComponent(m[1]!)
  } catch {
    return undefined
  }
}

/** Why `principal` may not make this request (a message for 403 FORBIDDEN), or undefined when it may. */
export const routeAccess = (principal: Principal, method: string, path: string): string | undefined => {
  switch (principal.role) {
    case "admin":
      return undefined
    case "reader":
      if (method !== "GET" && method !== "HEAD") return "A reader key may only read (GET)"
      return READER_REFUSED.some((r) => r.test(path)) ? "A reader key does not reach this route (it shows secrets or opens a session)" : undefined
    case "agent": {
      if (path.startsWith("/for_agent/")) {
        return agentOfPath(path) === principal.agentId ? undefined : `This key belongs to agent '${principal.agentId}': it reaches only /for_agent/${principal.agentId}/*`
      }
      if (method === "GET" && (NARROWED_MONITORING.has(path) || path === "/events")) return undefined
      return `This key belongs to agent '${principal.agentId}': it does not reach store-wide routes`
    }
  }
}

/**
 * The narrowing a monitoring figure gets: the query's, or for an agent key its own agent (asking for
 * another agent, or for the store, is refused with the message returned as `forbidden`).
 */
export const narrowFor = <N extends { readonly agent_id?: string | undefined }>(principal: Principal, query: N): { readonly narrowing: N } | { readonly forbidden: string } => {
  if (principal.role !== "agent") return { narrowing: query }
  if (query.agent_id !== undefined && query.agent_id !== principal.agentId) {
    return { forbidden: `This key belongs to agent '${principal.agentId}': it cannot see the figures of '${query.agent_id}'` }
  }
  return { narrowing: { ...query, agent_id: principal.agentId } }
}
