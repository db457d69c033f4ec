/**
 * The store's OAuth scopes (README, "Connecting MCP clients with OAuth"): what a token's grant lets a
 * client do, checked on every route besides the role its claims give (src/http/access.ts). A key has
 * no scopes: its role alone decides.
 *
 * - `mcp-store:tools`: the MCP endpoints (`/mcp`, `/sse`, `/messages`) and an agent's routes
 *   (`/for_agent/{agent_id}/*`, its MCP endpoint included): seeing and calling tools.
 * - `mcp-store:read`: every other GET route that shows no secret (monitoring, service lists, /events).
 * - `mcp-store:admin`: everything, store-wide changes and the routes that show secrets included.
 */

export const TOOLS_SCOPE = "mcp-store:tools"
export const READ_SCOPE = "mcp-store:read"
export const ADMIN_SCOPE = "mcp-store:admin"

export type StoreScope = typeof TOOLS_SCOPE | typeof READ_SCOPE | typeof ADMIN_SCOPE

/** The scopes the protected resource metadata advertises. */
export const SCOPES_SUPPORTED: ReadonlyArray<StoreScope> = [TOOLS_SCOPE, READ_SCOPE, ADMIN_SCOPE]

/** Store-wide GET routes that show secrets or inspect the store: admin only. */
const SECRET_READS = [/^\/for_store\/show_mcpconfig$/, /^\/for_store\/show_config$/, /^\/inspect\//]

/** The scope a request needs. */
export const scopeNeeded = (method: string, path: string): StoreScope => {
  if (path === "/mcp" || path === "/sse" || path === "/messages" || path.startsWith("/for_agent/")) return TOOLS_SCOPE
  if ((method === "GET" || method === "HEAD") && !SECRET_READS.some((r) => r.test(path))) return READ_SCOPE
  return ADMIN_SCOPE
}

/** Whether a grant holds the scope needed (`mcp-store:admin` holds every scope). */
export const grants = (granted: ReadonlySet<string>, needed: StoreScope): boolean => granted.has(needed) || granted.has(ADMIN_SCOPE)
