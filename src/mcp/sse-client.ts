/**
 * SDK v2's SSE client transport (`@modelcontextprotocol/client`), for services on the 2024-11-05
 * HTTP+SSE transport: loaded when the first of them is opened. The engine needs the client package
 * only for them (its errors, types and schemas come with the server package, which the faces load
 * anyway), and it adds 50 ms and 700 KB of code to a start; upstream OAuth loads the same package
 * with its first step (src/runtime/upstream-oauth.ts).
 */
import type * as Client from "@modelcontextprotocol/client"

export type SSEClientTransport = Client.SSEClientTransport
export type SseError = Client.SseError
export type SSEClientTransportClass = typeof Client.SSEClientTransport

let loaded: typeof Client | undefined

/** The client package, loaded once. */
export const sseClient = async (): Promise<typeof Client> => (loaded ??= await import("@modelcontextprotocol/client"))

/** Whether an error is the SSE transport's failure (none exists before the package is loaded). */
export const isSseError = (error: unknown): error is SseError => loaded !== undefined && error instanceof loaded.SseError

/** Whether an error is the client's "authorization required" (its transports throw it only with an auth provider). */
export const isUnauthorizedError = (error: unknown): error is Client.UnauthorizedError => loaded !== undefined && error instanceof loaded.UnauthorizedError
