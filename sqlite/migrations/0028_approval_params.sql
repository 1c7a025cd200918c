-- 0028_approval_params: an approval keeps what the approver sees
-- of its request's parameters (keybrake.ApprovalParams, as JSON): those
-- its fingerprint covers, masked and bounded (http/approval_params.go).
-- Approvals recorded before this migration keep NULL and show
-- "parameters not recorded".
ALTER TABLE approvals ADD COLUMN params TEXT;
