"""The names other layers use instead of importing the workflows (docs/architecture.md,
"What each room may import") are the ones the workflows use: the search attributes the
notification workflow sets are all in the contracts with their Temporal types (what `herald dev`
registers), and the schedules start the maintenance workflow by its type's name."""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import SearchAttributeIndexedValueType, SearchAttributeKey

import workflows.notification as notification
from activities.contracts import MAINTENANCE_WORKFLOW, SEARCH_ATTRIBUTES, STATE_ATTRIBUTE
from workflows.maintenance import MaintenanceWorkflow

TYPE_NAMES = {
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
}


def test_every_search_attribute_the_workflow_sets_is_in_the_contracts_with_its_type() -> None:
    keys = [v for v in vars(notification).values() if isinstance(v, SearchAttributeKey)]
    assert len(keys) == len(SEARCH_ATTRIBUTES) == 6
    assert {k.name: TYPE_NAMES[k.indexed_value_type] for k in keys} == SEARCH_ATTRIBUTES
    assert notification.STATE.name == STATE_ATTRIBUTE


def test_the_schedules_start_the_maintenance_workflow_by_its_type_name() -> None:
    defn = workflow._Definition.from_class(MaintenanceWorkflow)
    assert defn is not None and defn.name == MAINTENANCE_WORKFLOW == "MaintenanceWorkflow"
