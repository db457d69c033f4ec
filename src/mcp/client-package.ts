/**
 * SDK v2's client package (`@modelcontextprotocol/client`), loaded once, on first use: by the first
 * service on the 2024-11-05 HTTP+SSE transport (its SSE client transport) or the first upstream
 * OAuth step (src/runtime/upstream-oauth.ts). The engine needs nothing else of it (its errors, types
 * and schemas come with the server package, which the faces load anyway), and it adds 50 ms and
 * 700 KB of code to a start. Its error classes are recognised only once it is loaded.
 */
import type * as Client from "@modelcontextprotocol/client"
import { onDemand } from "../domain/on-demand.js"

export type SSEClientTransport = Client.SSEClientTransport
export type SseError = Client.SseError
export type SSEClientTransportClass = typeof Client.SSEClientTransport

const client = onDemand((): Promise<typeof Client> => import("@modelcontextprotocol/client"))

/** The client package, loaded once. */
export const clientPackage = async (): Promise<typeof Client> => client.loaded ?? (await client.load())

/** Whether an error is the SSE transport's failure (none exists before the package is loaded). */
export const isSseError = (error: unknown): error is SseError => client.loaded !== undefined && error instanceof client.loaded.SseError

/** The client package if it is loaded (its error classes, to recognise its errors). */
export const loadedClientPackage = (): typeof Client | undefined => client.loaded

/** Whether an error is the client's "authorization required" (its transports throw it only with an auth provider). */
export const isUnauthorizedError = (error: unknown): error is Client.UnauthorizedError => client.loaded !== undefined && error instanceof client.loaded.UnauthorizedError
