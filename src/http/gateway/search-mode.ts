/**
 * Search mode of the MCP endpoint (README, "Large catalogs"; docs/tool-search.md): instead of every
 * tool of a large catalog, a client is listed `search_tools` ({query, limit} -> the best matching
 * tools with their schemas, src/runtime/tool-search.ts), `call_tool` ({name, arguments} -> the
 * named tool's call through the store's one call pipeline) and the operator's always-visible tools
 * (`--always-visible-tools`). Both eras' faces (endpoint.ts, modern.ts) list and route through
 * here, so they cannot drift. Which requests are in search mode: `?tools=search` on the URL, else
 * the key's `tool_mode`, else `--tool-search-scopes`; `?tools=full` asks for the whole list.
 */
import type { CallToolResult } from "@modelcontextprotocol/server"
import type { Scope } from "../../domain/service-definition.js"
import { scopeLabel } from "../../domain/service-definition.js"
import { toolGate, type ToolGate } from "../../domain/tool-filter.js"
import type { Principal } from "../../config/api-keys.js"
import type { Store } from "../../runtime/store.js"
import { DEFAULT_SEARCH_LIMIT, MAX_QUERY_LENGTH, MAX_SEARCH_LIMIT } from "../../runtime/tool-search.js"
import { mcpTool, namesOf, offeredTools, scopeContext } from "./face.js"

/** The two tools of search mode (callable names always hold `__`, so no service's tool has these names). */
export const SEARCH_TOOLS = "search_tools"
export const CALL_TOOL = "call_tool"

/** How a request's tools are listed: undefined is the whole list; a value is search mode. */
export interface ToolListing {
  readonly mode: "search"
  /** Tools listed beside `search_tools` and `call_tool` (`--always-visible-tools`, globs over callable names). */
  readonly alwaysVisible: ToolGate
}

/** What the server was started with for search mode (`--tool-search-scopes`, `--always-visible-tools`). */
export interface ToolSearchSettings {
  readonly scopes: ReadonlyArray<string>
  readonly alwaysVisible: ReadonlyArray<string>
}

/**
 * The listing of one request: `?tools=search|full` on its URL first, then its key's `tool_mode`,
 * then whether its scope is one of `--tool-search-scopes`. A problem (another `tools` value) as text.
 */
export const toolListingOf = (settings: ToolSearchSettings, scope: Scope, principal: Principal, asked: string | ReadonlyArray<string> | undefined): ToolListing | undefined | { readonly problem: string } => {
  if (asked !== undefined && (typeof asked !== "string" || (asked !== "search" && asked !== "full"))) return { problem: "must be search or full (once)" }
  const mode = asked ?? ("toolMode" in principal ? principal.toolMode : undefined) ?? (toolGate(settings.scopes).allows(scopeLabel(scope)) ? "search" : "full")
  return mode === "search" ? { mode: "search", alwaysVisible: toolGate(settings.alwaysVisible) } : undefined
}

const SEARCH_TOOL = {
  name: SEARCH_TOOLS,
  title: "Search tools",
  description:
    "Find the tools of this MCP server that fit a task: give a few words of what you want to do (e.g. 'create a github issue', 'take a screenshot of a page'). " +
    `Answers the best matching tools, best first, each with its name, description and input schema; call one with ${CALL_TOOL}.`,
  inputSchema: {
    type: "object" as const,
    properties: {
      query: { type: "string", description: "What the tool should do, in a few words", minLength: 1, maxLength: MAX_QUERY_LENGTH },
      limit: { type: "integer", description: `How many tools to answer (default ${DEFAULT_SEARCH_LIMIT})`, minimum: 1, maximum: MAX_SEARCH_LIMIT }
    },
    required: ["query"]
  },
  annotations: { readOnlyHint: true, openWorldHint: false }
}

const CALL_TOOL_TOOL = {
  name: CALL_TOOL,
  title: "Call a tool",
  description: `Call a tool found with ${SEARCH_TOOLS}: its name as ${SEARCH_TOOLS} gave it, and its arguments as its input schema says. Answers the tool's own result.`,
  inputSchema: {
    type: "object" as const,
    properties: {
      name: { type: "string", description: `The tool's name, as ${SEARCH_TOOLS} answered it` },
      arguments: { type: "object", description: "The tool's arguments", additionalProperties: true }
    },
    required: ["name"]
  }
}

/** The tools a request lists, in MCP form: the whole list, or search mode's two and the always-visible ones. */
export const listedTools = (store: Store, scope: Scope, gate: ToolGate | undefined, listing: ToolListing | undefined) => {
  const offered = offeredTools(store, scope, gate)
  if (listing === undefined) return offered.map(mcpTool)
  return [SEARCH_TOOL, CALL_TOOL_TOOL, ...offered.filter((t) => listing.alwaysVisible.allows(t.name)).map(mcpTool)]
}

/** The names of `listedTools`, to tell a change. */
export const listedNames = (store: Store, scope: Scope, gate: ToolGate | undefined, listing: ToolListing | undefined): string =>
  listing === undefined ? namesOf(offeredTools(store, scope, gate)) : namesOf(listedTools(store, scope, gate, listing))

const refused = (text: string): CallToolResult => ({ content: [{ type: "text", text }], isError: true })

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v)

/** `search_tools` for a caller: its arguments checked, the tools it may call that best match, in rank order. */
export const searchOverMcp = (store: Store, scope: Scope, gate: ToolGate | undefined, args: Record<string, unknown> | undefined): CallToolResult => {
  const query = args?.["query"]
  const limit = args?.["limit"] ?? DEFAULT_SEARCH_LIMIT
  if (typeof query !== "string" || query.trim() === "" || query.length > MAX_QUERY_LENGTH) return refused(`${SEARCH_TOOLS}: query must be a non-empty string of at most ${MAX_QUERY_LENGTH} characters`)
  if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1 || limit > MAX_SEARCH_LIMIT) return refused(`${SEARCH_TOOLS}: limit must be an integer from 1 to ${MAX_SEARCH_LIMIT}`)
  const hits = store.toolSearch.search(scopeContext(store, scope).gated(gate), query, limit)
  const tools = hits.map((h) => mcpTool(h.tool))
  return { content: [{ type: "text", text: JSON.stringify({ tools }) }], structuredContent: { tools } }
}

/**
 * What a `tools/call` of a search-mode request is: search_tools' answer, or the call to make (for
 * call_tool, the tool it names with its arguments; any other name as it is, so a client that kept
 * a tool's name from a search may call it directly).
 */
export const routeSearchCall = (
  store: Store,
  scope: Scope,
  gate: ToolGate | undefined,
  name: string,
  args: Record<string, unknown> | undefined
): { readonly answer: CallToolResult } | { readonly name: string; readonly arguments: Record<string, unknown> | undefined } => {
  if (name === SEARCH_TOOLS) return { answer: searchOverMcp(store, scope, gate, args) }
  if (name !== CALL_TOOL) return { name, arguments: args }
  const inner = args?.["name"]
  const innerArgs = args?.["arguments"]
  if (typeof inner !== "string" || inner === "") return { answer: refused(`${CALL_TOOL}: name must be the name of a tool (from ${SEARCH_TOOLS})`) }
  if (inner === CALL_TOOL || inner === SEARCH_TOOLS) return { answer: refused(`${CALL_TOOL}: call ${inner} directly`) }
  if (innerArgs !== undefined && !isRecord(innerArgs)) return { answer: refused(`${CALL_TOOL}: arguments must be an object`) }
  return { name: inner, arguments: innerArgs }
}
