/**
 * What both faces of the MCP endpoint say: the 2025 sessions (endpoint.ts) and the 2026-07-28
 * per-request face (modern.ts). One list of a scope's tools as a key sees it, in one deterministic
 * order (by callable name), one way to call a tool over MCP (the store's call pipeline, the `Calls`
 * service, its failures mapped once), one way to hold a call, read or prompt for a client that
 * answers input in rounds, and the resource and prompt lists as MCP shows them (the `Catalog`
 * service), so the two eras cannot drift. The operations are given by the faces, which take them
 * once when they are built (`McpOperations`).
 */
import type { ServerResponse } from "node:http"
import { ProtocolErrorCode, Server, type CallToolResult, type ServerOptions } from "@modelcontextprotocol/server"
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/server/validators/ajv"
import { Cause, Exit, Option } from "effect"
import type { Scope } from "../../domain/service-definition.js"
import type { ToolGate } from "../../domain/tool-filter.js"
import type { TraceContext } from "../../domain/trace-context.js"
import { ValidationError, type CredentialsRequired, type StoreError, type TooMany } from "../../domain/errors.js"
import type { AnyExit, HeldOwner, HeldRun, InputRequest } from "../../runtime/input-required.js"
import { statusOf } from "../../machines/service.js"
import type { CallProgress, UpstreamRequestRelay } from "../../mcp/types.js"
import type { CancelSignal } from "../../domain/cancellation.js"
import type { CallerOf, CallExit, CallToolInput, TaskStarted } from "../../runtime/calls.js"
import type { CallOperations, CatalogOperations, Operations } from "../../runtime/operations.js"
import { toolErrorMessage } from "../../records/tool-records.js"
import type { ScopeContext } from "../../runtime/host.js"
import { LatestThrottle } from "../../runtime/progress.js"
import { openRequestSpan, recordMcpSpan } from "../request-span.js"
import { toolViewsFor } from "../../runtime/service-views.js"
import type { Store } from "../../runtime/store.js"
import { VERSION } from "../../version.js"

/** The operations the MCP faces run (the call path and the catalog), taken once when the endpoint is built (src/http/extras.ts). */
export type McpOperations = Pick<Operations, "calls" | "catalog">

/** The effects of a scope of the store. */
export const scopeContext = (store: Store, scope: Scope): ScopeContext => (scope.kind === "store" ? store.forStore() : store.forAgent(scope.agentId)).effects

/**
 * Tools a scope offers through MCP: those of its connected services that a key's `gate` lets
 * through, by callable name. In a deterministic order: the services by name, each service's tools
 * in the order its server lists them.
 */
export const offeredTools = (store: Store, scope: Scope, gate: ToolGate | undefined) =>
  Object.values(store.serviceActors(scope))
    .map((a) => a.getSnapshot())
    .filter((s) => statusOf(s) === "healthy" || statusOf(s) === "warning")
    .sort((a, b) => (a.context.name < b.context.name ? -1 : a.context.name > b.context.name ? 1 : 0))
    .flatMap((s) => toolViewsFor(s, gate))

/** What the MCP endpoint declares in either era, from what the scope offers: tools, logging, and the catalog's parts it has. */
const mcpCapabilities = (offers: ReturnType<CatalogOperations["scopeCapabilities"]>) => ({
  tools: { listChanged: true },
  logging: {},
  ...(offers.resources ? { resources: { listChanged: true, ...(offers.subscribe ? { subscribe: true } : {}) } } : {}),
  ...(offers.prompts ? { prompts: { listChanged: true } } : {}),
  ...(offers.completions ? { completions: {} } : {})
})

// Each SDK Server builds its own Ajv instance unless given one (a third of an initialize's CPU and
// most of a session's memory); the endpoint's servers validate nothing with it but elicitation answers.
const validator = new AjvJsonSchemaValidator()

/**
 * The SDK v2 server of either face for a scope (a 2025 session's, or one 2026-07-28 request's):
 * its name, the store's version, the capabilities of what the scope `offers`, one shared validator;
 * `options` and `extensions` add what one face needs (the modern face's cache hints and the tasks
 * extension). The faces add their handlers.
 */
export const mcpServer = (
  scope: Scope,
  offers: ReturnType<CatalogOperations["scopeCapabilities"]>,
  options: Omit<ServerOptions, "capabilities" | "jsonSchemaValidator"> = {},
  extensions?: Record<string, Record<string, never>>
): Server => new Server(serverInfoOf(scope), { ...options, capabilities: { ...mcpCapabilities(offers), ...(extensions !== undefined ? { extensions } : {}) }, jsonSchemaValidator: validator })

/**
 * A JSON-RPC error written as the whole HTTP answer: the endpoint's refusals (a missing session,
 * a cap, a shutdown), with the request's id when it is known (`null` otherwise).
 */
export const jsonRpcError = (
  res: ServerResponse,
  status: number,
  code: number,
  message: string,
  options: { readonly headers?: Record<string, string>; readonly data?: unknown; readonly id?: unknown } = {}
): void =>
  void res.writeHead(status, { "content-type": "application/json", ...options.headers }).end(
    JSON.stringify({
      jsonrpc: "2.0",
      error: { code, message, ...(options.data !== undefined ? { data: options.data } : {}) },
      id: typeof options.id === "string" || typeof options.id === "number" ? options.id : null
    })
  )

/** The store's name and version as a scope's MCP server: `mcp-store`, or `mcp-store/<agent id>`. */
export const serverInfoOf = (scope: Scope) => ({ name: scope.kind === "store" ? "mcp-store" : `mcp-store/${scope.agentId}`, version: VERSION })

/** The names of a tool list in one string, to tell whether the set changed. */
export const namesOf = (tools: ReadonlyArray<{ readonly name: string }>): string => tools.map((t) => t.name).join("\n")

/**
 * A tool as MCP lists it: every MCP field of the upstream's tool (src/runtime/service-views.ts;
 * app-only tools are not offered), unchanged but one: a tool whose upstream requires tasks
 * (`execution.taskSupport` "required") is called by the store as a task, and is an ordinary tool to
 * the store's clients ("forbidden": the store's faces do not take 2025-11-25's task-augmented
 * calls), so that a client that refuses to call such a tool without tasks calls it.
 */
export const mcpTool = (t: ReturnType<typeof offeredTools>[number]) => ({
  name: t.name,
  ...(t.title !== undefined ? { title: t.title } : {}),
  description: t.description,
  inputSchema: t.inputSchema as { type: "object" },
  ...(t.outputSchema !== undefined ? { outputSchema: t.outputSchema as { type: "object" } } : {}),
  ...(t.annotations !== undefined ? { annotations: t.annotations } : {}),
  ...(t.execution !== undefined ? { execution: t.execution["taskSupport"] === "required" ? { ...t.execution, taskSupport: "forbidden" } : t.execution } : {}),
  ...(t._meta !== undefined ? { _meta: t._meta } : {})
})

/** A `tools/call` of an MCP client, as either face received it. */
export interface McpToolCall {
  readonly name: string
  readonly arguments?: Record<string, unknown> | undefined
  /** Sends one progress notification to the client (set when the client gave a progressToken). */
  readonly progress?: ((progress: CallProgress) => Promise<void>) | undefined
  /** Answers the upstream's elicitation and sampling requests of the call. */
  readonly relay: UpstreamRequestRelay
  /** The client's trace context (the W3C keys of the request's `_meta`). */
  readonly trace?: TraceContext | undefined
  /** Who makes the call, for an approval it may need (src/runtime/approvals.ts). */
  readonly caller?: CallerOf | undefined
  /** The MCP session (2025 era) and the JSON-RPC request id, for the request's span. */
  readonly sessionId?: string | undefined
  readonly requestId?: string | number | undefined
}

/** The failures of a call whose name resolved to no tool of the scope. */
const UNRESOLVED: ReadonlySet<string> = new Set(["ToolNotFound", "AmbiguousTool", "ServiceNotFound"])

/** The span of an MCP tools/call request (tracing on): opened under the client's `_meta` context, recorded by `end`. */
const toolsCallSpan = (store: Store, call: Omit<McpToolCall, "relay">) => {
  const tracer = store.tracer
  if (!tracer.enabled) return undefined
  const span = openRequestSpan(call.trace)
  const startMs = performance.now()
  return {
    span,
    end: (error: { readonly type: string; readonly message: string } | undefined) =>
      recordMcpSpan(tracer, span, {
        method: "tools/call",
        // Named by the tool only when it is one of the scope's: a caller's made-up names stay out of span names.
        target: error !== undefined && UNRESOLVED.has(error.type) ? undefined : call.name,
        sessionId: call.sessionId,
        startMs,
        attributes: { "gen_ai.tool.name": call.name, "gen_ai.operation.name": "execute_tool", "jsonrpc.request.id": call.requestId === undefined ? undefined : String(call.requestId) },
        error
      })
  }
}

/** How a call's MCP answer failed, for its span: `tool_error` (the tool's own `isError`, as the conventions say), the store's error class, or a defect. */
const spanError = (exit: CallExit): { readonly type: string; readonly message: string } | undefined => {
  if (Exit.isSuccess(exit)) return exit.value.result.isError === true ? { type: "tool_error", message: toolErrorMessage({ content: exit.value.result.content ?? [] }) } : undefined
  const failure = Cause.failureOption(exit.cause)
  if (Option.isSome(failure)) return { type: failure.value._tag, message: failure.value.message }
  return Cause.isInterruptedOnly(exit.cause) ? { type: "cancelled", message: "the client cancelled the call or went away" } : { type: "_OTHER", message: "a defect" }
}

/**
 * Calls a tool through the store's call pipeline, at once. No time-out of its own: the call lasts
 * while the client's request is open (`signal`), up to --max-call-seconds. The upstream's result
 * comes back as it came; the store's refusals and failures (unknown tool, bad arguments, service
 * down) are the tool's failure (`isError`); a defect is thrown.
 */
export const callOverMcp = async (calls: CallOperations, store: Store, scope: Scope, gate: ToolGate | undefined, call: McpToolCall, signal: CancelSignal): Promise<CallToolResult> =>
  mcpResultOf(await runOverMcp(calls, store, scope, gate, call, signal, false))

/** A task an upstream answered a call with, for the client that follows it through the store: the task, and the service it is of. */
export class McpTaskStarted {
  constructor(
    readonly started: TaskStarted,
    readonly serviceName: string
  ) {}
}

/** How many progress notifications of a call wait, in order, while the client is sent one. */
const PROGRESS_KEPT = 16
/** How long a call's result waits for its progress notifications still waiting to be sent (ms). */
const PROGRESS_DRAIN_MS = 1000

/** A call's progress on its way to the MCP client: each upstream progress in order; past PROGRESS_KEPT waiting while one is sent, a flood is coalesced to its latest. */
const progressOf = (call: Pick<McpToolCall, "progress">): LatestThrottle<CallProgress> | undefined =>
  call.progress === undefined ? undefined : new LatestThrottle<CallProgress>(0, call.progress, PROGRESS_KEPT)

/** At a call's end, what is still waiting goes before the result (a client drops progress that comes after it); a cancelled call's is dropped. */
const progressEnd = async (progress: LatestThrottle<CallProgress> | undefined, signal: { readonly aborted: boolean }): Promise<void> => {
  if (signal.aborted) progress?.close()
  else await progress?.drain(PROGRESS_DRAIN_MS)
}

/**
 * `callOverMcp` for a client that follows a task itself (one that declared the tasks extension):
 * an upstream's task handle comes back as the task (`McpTaskStarted`), anything else as `callOverMcp`'s.
 */
export const startOverMcp = async (calls: CallOperations, store: Store, scope: Scope, gate: ToolGate | undefined, call: McpToolCall, signal: CancelSignal): Promise<CallToolResult | McpTaskStarted> => {
  const exit = await runOverMcp(calls, store, scope, gate, call, signal, true)
  if (Exit.isSuccess(exit) && exit.value.task !== undefined) return new McpTaskStarted(exit.value.task, exit.value.serviceName)
  return mcpResultOf(exit)
}

const runOverMcp = async (calls: CallOperations, store: Store, scope: Scope, gate: ToolGate | undefined, call: McpToolCall, signal: CancelSignal, keepTask: boolean): Promise<CallExit> => {
  const ctx = scopeContext(store, scope).gated(gate)
  const progress = progressOf(call)
  const traced = toolsCallSpan(store, call)
  const trace = traced?.span ?? call.trace
  try {
    const exit = await calls.runCall(
      ctx,
      {
        tool_name: call.name,
        args: call.arguments ?? {},
        timeout: store.limits.maxCallSeconds,
        ...(progress !== undefined ? { onProgress: (p: CallProgress) => progress.push(p) } : {}),
        ...(trace !== undefined ? { trace } : {}),
        ...(keepTask ? { keepTask } : {}),
        ...(call.caller !== undefined ? { caller: call.caller } : {}),
        relay: call.relay
      },
      signal
    )
    traced?.end(spanError(exit))
    return exit
  } finally {
    await progressEnd(progress, signal)
  }
}

/** The data of a CREDENTIALS_REQUIRED protocol error (a `per_user` service's read or prompt): what to give, and where; never a value. */
export const credentialsData = (e: CredentialsRequired): Record<string, unknown> => ({
  code: "CREDENTIALS_REQUIRED",
  service_name: e.serviceName,
  headers: e.headers,
  env: e.env,
  oauth: e.oauth,
  missing: e.missing,
  route: e.route
})

/** The JSON-RPC code of a refusal at a cap (TOO_MANY: the session cap, a `per_user` service's connections all in use). */
export const TOO_MANY_CODE = -32000

/** The data of a TOO_MANY protocol error: which cap, its bound, and when to try again (the REST body's details; null: trying again cannot help). */
export const tooManyData = (e: Pick<TooMany, "limit" | "max" | "retryAfterSeconds">): Record<string, unknown> => ({
  code: "TOO_MANY",
  details: { limit: e.limit, max: e.max, retry_after_seconds: e.retryAfterSeconds }
})

/** A store's TooMany (a `per_user` service's connections all in use or held) as the JSON-RPC error of either era: try again later. */
export const tooManyError = (e: TooMany): RpcError & { readonly data: Record<string, unknown> } => ({
  code: TOO_MANY_CODE,
  message: e.message,
  data: tooManyData(e)
})

/** A JSON-RPC error as both faces answer it. */
export interface RpcError {
  readonly code: number
  readonly message: string
  readonly data?: Record<string, unknown>
}

/**
 * A store error of a catalog or task request as the JSON-RPC error of either era (one mapping for
 * both faces; each makes its own error class of it): a bad parameter or an unknown prompt is
 * invalid params, a request without the caller's own credential for a `per_user` service is an
 * invalid request saying what to give, a cap is TOO_MANY, anything else an internal error with its
 * words. A resource not found is told as each era tells it, by the face.
 */
export const rpcErrorOf = (e: StoreError): RpcError => {
  switch (e._tag) {
    case "PromptNotFound":
    case "ValidationError":
      return { code: ProtocolErrorCode.InvalidParams, message: e.message }
    case "CredentialsRequired":
      return { code: ProtocolErrorCode.InvalidRequest, message: e.message, data: credentialsData(e) }
    case "TooMany":
      return tooManyError(e)
    default:
      return { code: ProtocolErrorCode.InternalError, message: e.message }
  }
}

/** A call's end as an MCP client gets it: the upstream's result as it came, the store's refusals and failures as the tool's failure, a defect thrown. */
const mcpResultOf = (exit: CallExit): CallToolResult => {
  if (Exit.isSuccess(exit)) return exit.value.result
  const failure = Cause.failureOption(exit.cause)
  if (Option.isSome(failure)) return { content: [{ type: "text", text: failure.value.message }], isError: true }
  throw Cause.squash(exit.cause)
}

/** What a client that answers input in rounds is told: how its request ended (`A`), or the requests to answer and the state to retry with. */
export type HeldAnswer<A> = { readonly ended: A } | { readonly inputRequests: Readonly<Record<string, InputRequest>>; readonly requestState: string }

/** A client's retry of a request answered `input_required`: the state it was given and its answers, by key. */
export interface InputRetry {
  readonly state: string
  readonly responses: Readonly<Record<string, unknown>>
}

/** How a held request takes part in rounds: the client's retry (if it is one) and the request methods it can answer. */
export interface InputTurn {
  readonly retry: InputRetry | undefined
  readonly accepts: (method: string) => boolean
}

/**
 * A request whose client answers its server's requests for input in rounds (2026-07-28's
 * `input_required`): a tool call, a resource read or a prompt, started (`run`), or taken back by the
 * turn's retry with the client's answers (held by the store: src/runtime/input-required.ts), for
 * the same key, scope and `subject`. The request's progress goes to `onProgress` while this round
 * waits (each round is a request of its own). A retry that does not fit its call is the
 * ValidationError thrown; a client that goes away while its call runs cancels it.
 */
export const heldOverMcp = async <A extends AnyExit>(
  store: Store,
  run: HeldRun<A>,
  owner: HeldOwner,
  turn: InputTurn,
  signal: AbortSignal,
  onProgress?: (progress: CallProgress) => void
): Promise<HeldAnswer<A>> => {
  const step = await store.held.turn(run, owner, { retry: turn.retry, accepts: turn.accepts, onProgress, signal })
  if (step instanceof ValidationError) throw step
  return step._tag === "Ended" ? { ended: step.exit } : { inputRequests: step.requests, requestState: step.state }
}

/** A tool call held for its client's input (`heldOverMcp`): the call's result as an MCP client gets it, or the round's requests. */
export const heldCallOverMcp = async (
  calls: CallOperations,
  store: Store,
  scope: Scope,
  gate: ToolGate | undefined,
  call: Omit<McpToolCall, "relay">,
  /** Who calls: its owner digest, and whether it came with a key (its share of the held calls). */
  who: { readonly owner: string; readonly keyed: boolean },
  turn: InputTurn,
  signal: AbortSignal
): Promise<HeldAnswer<CallToolResult>> => {
  const ctx = scopeContext(store, scope).gated(gate)
  const traced = toolsCallSpan(store, call)
  const trace = traced?.span ?? call.trace
  const input: CallToolInput = {
    tool_name: call.name,
    args: call.arguments ?? {},
    timeout: store.limits.maxCallSeconds,
    ...(trace !== undefined ? { trace } : {}),
    ...(call.caller !== undefined ? { caller: call.caller } : {}),
    // A call that waits for an approval shows its page to this client (it answers input in rounds).
    approvalByUrl: true
  }
  const progress = progressOf(call)
  try {
    const answer = await heldOverMcp(store, calls.heldCallRun(ctx, input), { scope: ctx.label, owner: who.owner, keyed: who.keyed, subject: `tools/call ${call.name}` }, turn, signal, progress === undefined ? undefined : (p) => progress.push(p))
    // Each round is a request of its own, with its span; the call's own span is under the round that started it.
    traced?.end("ended" in answer ? spanError(answer.ended) : undefined)
    return "ended" in answer ? { ended: mcpResultOf(answer.ended) } : answer
  } finally {
    await progressEnd(progress, signal)
  }
}

/** A catalog view without the store's own fields (the service's name, the upstream's original name or URI). */
const strip = <T extends { service_name: string }>(v: T, ...keys: Array<string>) =>
  Object.fromEntries(Object.entries(v).filter(([k]) => k !== "service_name" && !keys.includes(k)))

/** A scope's resources, resource templates and prompts as MCP lists them (read from the actors' snapshots: no upstream request). */
export const mcpResources = (catalog: CatalogOperations, ctx: ScopeContext) => catalog.resourceViews(ctx).map((r) => strip(r, "original_uri")) as never
export const mcpResourceTemplates = (catalog: CatalogOperations, ctx: ScopeContext) => catalog.resourceTemplateViews(ctx).map((t) => strip(t, "original_uri_template")) as never
export const mcpPrompts = (catalog: CatalogOperations, ctx: ScopeContext) => catalog.promptViews(ctx).map((p) => strip(p, "original_name")) as never
