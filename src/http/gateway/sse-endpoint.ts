/**
 * The legacy SSE transport of the MCP endpoint (MCP 2024-11-05), for clients that do not speak
 * Streamable HTTP: `GET /sse` opens a session's event stream, whose first event (`endpoint`) names
 * the URL the client POSTs its messages to (`/messages?sessionId=...`); the answers come back on
 * the stream. `/for_agent/{id}/sse` and `/for_agent/{id}/messages` are an agent's. The sessions
 * are the MCP endpoint's own (src/http/gateway/endpoint.ts: same server and handlers, cap, expiry,
 * list_changed, shutdown); this file holds what only this transport needs.
 *
 * A request is not an HTTP request here (the POST is answered 202 at once, the answer goes on the
 * stream), so a session's requests in flight are counted from the messages themselves: the idle
 * clock of a session must not run during a long tool call.
 */
import type { IncomingMessage } from "node:http"
import type { JSONRPCMessage, MessageExtraInfo, RequestId, Transport } from "@modelcontextprotocol/server"
import type { Scope } from "../../domain/service-definition.js"

/**
 * Where a scope's SSE clients POST their messages, as announced in the `endpoint` event: a path
 * without scheme and host (the SDK's transport writes the path from the root), so it holds
 * whatever name the client reached the store by. Agent ids are URL-safe (AGENT_ID_PATTERN).
 */
export const messagesPath = (scope: Scope): string => (scope.kind === "store" ? "/messages" : `/for_agent/${scope.agentId}/messages`)

/**
 * Whether a GET asks for an event stream. A web page cannot make the browser send this on a
 * navigation or an `<img>`: only fetch and EventSource, whose Origin the request guard checks.
 */
export const acceptsEventStream = (req: IncomingMessage): boolean => (req.headers.accept ?? "").toLowerCase().includes("text/event-stream")

/** The `sessionId` query parameter of a POST to the messages route. */
export const sessionIdOf = (req: IncomingMessage): string | undefined => {
  const url = req.url ?? ""
  const query = url.indexOf("?")
  return query === -1 ? undefined : (new URLSearchParams(url.slice(query + 1)).get("sessionId") ?? undefined)
}

/**
 * Counts a transport's requests in flight: `begin` when a client request arrives, `end` when its
 * answer is sent or the client cancels it (the SDK then sends no answer). Set before the SDK server
 * connects (it calls the handler it finds before its own). Messages are checked by shape only: the
 * transport has validated the incoming ones, and the outgoing ones are the SDK's.
 */
export const watchRequests = (transport: Transport, begin: () => void, end: () => void): void => {
  const pending = new Set<RequestId>()
  const settle = (id: unknown) => {
    if ((typeof id === "string" || typeof id === "number") && pending.delete(id)) end()
  }
  // After any watcher set before it (the request spans, method-spans.ts).
  const before = transport.onmessage
  transport.onmessage = (message: JSONRPCMessage, extra?: MessageExtraInfo) => {
    before?.(message, extra)
    if ("method" in message && "id" in message) {
      if (pending.has(message.id)) return
      pending.add(message.id)
      begin()
    } else if ("method" in message && message.method === "notifications/cancelled") {
      settle(message.params?.["requestId"])
    }
  }
  const send = transport.send.bind(transport)
  transport.send = (message, options) => {
    if (!("method" in message) && "id" in message) settle(message.id)
    return send(message, options)
  }
}
