import React, { useCallback, useMemo, useState } from "react";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { formatDistanceToNowStrict, parseISO } from "date-fns";
import clsx from "clsx";
import { twMerge } from "tailwind-merge";

import { fetchOrdersForCustomerAccount, type OrderSummaryResponse } from "../api/orders";
import { useFeatureFlagWithDefault } from "../hooks/useFeatureFlagWithDefault";
import styles from "./OrderTable.module.css";

const PAGE_SIZE_OPTIONS = [10, 25, 50, 100] as const;
const STATUS_BADGE_CLASSNAMES: Record<string, string> = {
  pending: "bg-amber-100 text-amber-900 ring-1 ring-inset ring-amber-600/20",
  paid: "bg-emerald-100 text-emerald-900 ring-1 ring-inset ring-emerald-600/20",
  refunded: "bg-slate-100 text-slate-700 ring-1 ring-inset ring-slate-500/20",
  failed: "bg-rose-100 text-rose-900 ring-1 ring-inset ring-rose-600/20",
};

export interface OrderTableProps {
  customerAccountId: string;
  initialPageSize?: (typeof PAGE_SIZE_OPTIONS)[number];
  onOrderSelected?: (orderId: string) => void;
}

function cn(...inputs: Array<string | false | null | undefined>): string {
  return twMerge(clsx(inputs));
}

export function OrderTable({ customerAccountId, initialPageSize = 25, onOrderSelected }: OrderTableProps) {
  const [pageIndex, setPageIndex] = useState(0);
  const [pageSize, setPageSize] = useState<number>(initialPageSize);
  const showRefundColumnForSupportAgents = useFeatureFlagWithDefault("orders.refund-column", false);
  const queryClient = useQueryClient();

  const { data, isLoading, isError, refetch } = useQuery<OrderSummaryResponse>({
    queryKey: ["orders", customerAccountId, pageIndex, pageSize],
    queryFn: () => fetchOrdersForCustomerAccount(customerAccountId, { pageIndex, pageSize }),
    staleTime: 30_000,
    placeholderData: (previous) => previous,
  });

  const rows = useMemo(
    () =>
      (data?.orders ?? []).map((order) => ({
        ...order,
        relativeCreatedAt: formatDistanceToNowStrict(parseISO(order.createdAt), { addSuffix: true }),
      })),
    [data],
  );

  const handleRowClick = useCallback(
    (orderId: string) => {
      void queryClient.prefetchQuery({ queryKey: ["order", orderId] });
      onOrderSelected?.(orderId);
    },
    [onOrderSelected, queryClient],
  );

  if (isError) {
    return (
      <div role="alert" className={styles.errorBanner}>
        Could not load orders. <button onClick={() => void refetch()}>Try again</button>
      </div>
    );
  }

  return (
    <table className={cn(styles.table, isLoading && styles.tableLoading)} data-testid="order-table">
      <thead>
        <tr>
          <th scope="col">Order</th>
          <th scope="col">Placed</th>
          <th scope="col">Status</th>
          <th scope="col" className="text-right">Total</th>
          {showRefundColumnForSupportAgents && <th scope="col">Refund</th>}
        </tr>
      </thead>
      <tbody>
        {rows.map((row) => (
          <tr key={row.id} onClick={() => handleRowClick(row.id)} className="cursor-pointer hover:bg-slate-50">
            <td className="font-mono text-xs">{row.number}</td>
            <td title={row.createdAt}>{row.relativeCreatedAt}</td>
            <td>
              <span className={cn("rounded-md px-2 py-1 text-xs font-medium", STATUS_BADGE_CLASSNAMES[row.status])}>
                {row.status}
              </span>
            </td>
            <td className="text-right tabular-nums">{row.totalFormatted}</td>
            {showRefundColumnForSupportAgents && <td>{row.refundable ? "Eligible" : "—"}</td>}
          </tr>
        ))}
      </tbody>
      <tfoot>
        <tr>
          <td colSpan={5}>
            <select value={pageSize} onChange={(event) => setPageSize(Number(event.target.value))}>
              {PAGE_SIZE_OPTIONS.map((size) => (
                <option key={size} value={size}>
                  {size} per page
                </option>
              ))}
            </select>
            <button disabled={pageIndex === 0} onClick={() => setPageIndex((index) => index - 1)}>
              Previous
            </button>
            <button disabled={!data?.hasNextPage} onClick={() => setPageIndex((index) => index + 1)}>
              Next
            </button>
          </td>
        </tr>
      </tfoot>
    </table>
  );
}
