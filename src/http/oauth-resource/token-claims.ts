/**
 * How a verified access token's claims become the store's principal (src/http/access.ts), the same
 * kind a key gives, so every route and the tool allow-lists treat both alike. By default the claims
 * are `role` (`admin`, `agent` or `reader`), `agent_id` (the agent an `agent` token acts for),
 * `tools` (a list of tool globs, as a key's `--tools`) and `scope` (space-separated, or a list);
 * `--auth-claim-map` names other claims (src/domain/claim-map.ts) for an authorization server that
 * cannot use these names.
 */
import type { JWTPayload } from "jose"
import type { Principal, Role } from "../../config/api-keys.js"
import { agentIdProblem } from "../../domain/service-definition.js"
import type { ClaimMap } from "../../domain/claim-map.js"
import { globsProblem, NO_TOOLS } from "../../domain/tool-filter.js"

const ROLES: ReadonlyArray<Role> = ["admin", "agent", "reader"]
/** Scopes read from one token, at most. */
const MAX_SCOPES = 100

/** What a token's claims make of it: the principal and the scopes granted, or why it admits nothing here. */
export type ClaimsOutcome = { readonly principal: Principal; readonly scopes: ReadonlySet<string> } | { readonly problem: string }

const claim = (payload: JWTPayload, name: string): unknown => (Object.hasOwn(payload, name) ? payload[name] : undefined)

/** The role of a `role` claim: a role name, or a list holding exactly one. */
const roleOf = (value: unknown): Role | string => {
  if (typeof value === "string") return (ROLES as ReadonlyArray<string>).includes(value) ? (value as Role) : `the role claim '${value.slice(0, 40)}' is none of admin, agent, reader`
  if (Array.isArray(value)) {
    const found = ROLES.filter((r) => value.includes(r))
    if (found.length === 1) return found[0]!
    return found.length === 0 ? "the role claim names none of admin, agent, reader" : `the role claim names several roles (${found.join(", ")})`
  }
  return "the token has no role claim"
}

/** The scopes of a `scope` claim: space-separated text or a list of strings. */
const scopesOf = (value: unknown): ReadonlySet<string> => {
  const list = typeof value === "string" ? value.split(" ") : Array.isArray(value) ? value.filter((s): s is string => typeof s === "string") : []
  return new Set(list.filter((s) => s !== "").slice(0, MAX_SCOPES))
}

/** The principal and scopes of verified claims; `denyByDefault` gives an agent without `tools` an empty list, as a key. */
export const principalOfClaims = (payload: JWTPayload, map: ClaimMap, denyByDefault: boolean): ClaimsOutcome => {
  const role = roleOf(claim(payload, map.role))
  if (!(ROLES as ReadonlyArray<string>).includes(role)) return { problem: role }
  const scopes = scopesOf(claim(payload, map.scope))
  const subject = `${payload.iss ?? ""} ${typeof payload.sub === "string" ? payload.sub : typeof payload["client_id"] === "string" ? payload["client_id"] : ""}`
  if (role !== "agent") return { principal: { role: role as "admin" | "reader", subject }, scopes }
  const agentId = claim(payload, map.agent_id)
  if (typeof agentId !== "string") return { problem: `an agent token needs the claim '${map.agent_id}' (the agent's id)` }
  const idProblem = agentIdProblem(agentId)
  if (idProblem !== undefined) return { problem: `the claim '${map.agent_id}' is no agent id: ${idProblem}` }
  const tools = claim(payload, map.tools)
  const toolsProblem = tools === undefined ? undefined : globsProblem(tools)
  if (toolsProblem !== undefined) return { problem: `the claim '${map.tools}' ${toolsProblem}` }
  const list = tools !== undefined ? (tools as ReadonlyArray<string>) : denyByDefault ? NO_TOOLS : undefined
  return { principal: { role: "agent", agentId, subject, ...(list !== undefined ? { tools: list } : {}) }, scopes }
}
